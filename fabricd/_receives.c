/* fabricd._receives: where the Sends of a batch land, in C (Target._sends is the caller,
 * send_run.SendRun.take holds the rules).
 *
 * sends() lands Sends of a batch in the EP's receives for as long as the next receive is the
 * common one (one buffer in shared memory that holds the Send) and stops before any other;
 * planned() takes the receives of one segment in a C program's memory the same way, planning
 * each Send's bytes for its receive (written when the run ends: Target._received). So this
 * module can only decline work; it never decides an error. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdbool.h>

#include "pyu64.h"

static PyObject *s_cookie, *s_views, *s_capacity, *s_spans, *s_popleft, *s_freed, *s_pid;

/* The common receive: no process memory (``spans`` empty), one writable byte buffer of at
 * least ``n`` bytes, ``capacity`` at least ``n``. Its buffer view and cookie (new references)
 * when it is; NULL, no exception left, when not. */
static PyObject *common_receive(PyObject *recv, unsigned long long n, PyObject **cookie)
{
	PyObject *spans = PyObject_GetAttr(recv, s_spans), *views = NULL, *view = NULL;
	unsigned long long capacity;
	Py_buffer *b;
	bool ok = false;

	if (!spans || !PyList_Check(spans) || PyList_GET_SIZE(spans))
		goto done;
	views = PyObject_GetAttr(recv, s_views);
	if (!views || !PyList_Check(views) || PyList_GET_SIZE(views) != 1)
		goto done;
	view = PyList_GET_ITEM(views, 0);
	if (!PyMemoryView_Check(view))
		goto done;
	b = PyMemoryView_GET_BUFFER(view);
	if (b->readonly || b->ndim != 1 || b->itemsize != 1 || b->strides[0] != 1 ||
	    (unsigned long long)b->len < n)
		goto done;
	*cookie = PyObject_GetAttr(recv, s_cookie);
	if (!*cookie)
		goto done;
	{
		PyObject *c = PyObject_GetAttr(recv, s_capacity);
		ok = c && as_u64(c, &capacity) && capacity >= n && PyLong_Check(*cookie);
		Py_XDECREF(c);
	}
	if (ok)
		Py_INCREF(view);
	else
		Py_CLEAR(*cookie);
done:
	Py_XDECREF(spans);
	Py_XDECREF(views);
	PyErr_Clear();
	return ok ? view : NULL;
}

/* Where a Send's bytes go in a C program's receives: the process (0 until the first) and the
 * pieces of the payload planned for it (procmem.add_piece's list). */
struct plan {
	unsigned long long pid;
	PyObject *pieces;
};

/* A receive of one segment in a process's own memory that holds ``n`` bytes, in ``plan``'s
 * process (any, while it has none), its LMR not freed (send_run.SendRun.take's rule): its
 * cookie (a new reference), its address into ``address`` and its process into ``pid``; NULL
 * when it is not (no exception left). */
static PyObject *process_receive(PyObject *recv, unsigned long long n, const struct plan *plan,
				 unsigned long long *address, unsigned long long *pid)
{
	PyObject *spans = PyObject_GetAttr(recv, s_spans), *cookie = NULL, *freed = NULL,
		 *owner = NULL, *capacity = NULL, *span;
	unsigned long long room;
	bool ok = false;

	if (!spans || !PyList_Check(spans) || PyList_GET_SIZE(spans) != 1)
		goto done;
	span = PyList_GET_ITEM(spans, 0);
	if (!PyTuple_CheckExact(span) || PyTuple_GET_SIZE(span) != 3 ||
	    !as_u64(PyTuple_GET_ITEM(span, 1), address))
		goto done;
	freed = PyObject_GetAttr(PyTuple_GET_ITEM(span, 0), s_freed);
	owner = PyObject_GetAttr(PyTuple_GET_ITEM(span, 0), s_pid);
	capacity = PyObject_GetAttr(recv, s_capacity);
	cookie = PyObject_GetAttr(recv, s_cookie);
	ok = freed == Py_False && owner && as_u64(owner, pid) && *pid &&
	     (!plan->pid || plan->pid == *pid) && capacity && as_u64(capacity, &room) && room >= n &&
	     cookie && PyLong_Check(cookie);
done:
	Py_XDECREF(spans);
	Py_XDECREF(freed);
	Py_XDECREF(owner);
	Py_XDECREF(capacity);
	if (!ok)
		Py_CLEAR(cookie);
	PyErr_Clear();
	return cookie;
}

/* procmem.add_piece: the payload's [at, +n) planned for ``address`` after ``pieces``: onto
 * exactly the last piece's bytes it replaces it, right after them (at its target and in the
 * payload) it extends it, else a piece of its own. False on a Python error. */
static bool add_piece(PyObject *pieces, unsigned long long address, unsigned long long at,
		      unsigned long long n)
{
	Py_ssize_t last = PyList_GET_SIZE(pieces) - 1;
	unsigned long long to, start, length;
	PyObject *piece;

	if (last >= 0) {
		PyObject *p = PyList_GET_ITEM(pieces, last);

		if (PyTuple_CheckExact(p) && PyTuple_GET_SIZE(p) == 3 &&
		    as_u64(PyTuple_GET_ITEM(p, 0), &to) && as_u64(PyTuple_GET_ITEM(p, 1), &start) &&
		    as_u64(PyTuple_GET_ITEM(p, 2), &length)) {
			if (to == address && length == n)
				piece = Py_BuildValue("(KKK)", address, at, n);
			else if (length <= ~0ULL - to && to + length == address &&
				 length <= ~0ULL - start && start + length == at && n <= ~0ULL - length)
				piece = Py_BuildValue("(KKK)", to, start, length + n);
			else
				goto append;
			return piece && !PyList_SetItem(pieces, last, piece);
		}
	}
append:
	piece = Py_BuildValue("(KKK)", address, at, n);
	if (!piece)
		return false;
	last = PyList_Append(pieces, piece);
	Py_DECREF(piece);
	return !last;
}

/* The loop of sends() and planned(): Sends ``i``, ``i + 1``, ... of a SENDS frame
 * (``lengths``; Send ``i``'s bytes at ``at`` in ``payload``) landed, each in the first of
 * ``recvs`` (the EP's deque), which leaves it: its completion row (0, cookie, length) appended
 * to ``done``, the receive to ``taken``, a view of its bytes to ``bodies`` (send_run.SendRun's
 * lists). ``plan`` NULL: the receive is the common one in shared memory (``common_receive``)
 * and the bytes are copied into it; else one in a process's memory (``process_receive``) and
 * the bytes are planned for it. It stops at the last Send, when no receive is left, or before
 * a receive of another kind; the index and offset of the first Send not landed (and the
 * plan's process). */
static PyObject *land_sends(PyObject *const *args, struct plan *plan)
{
	PyObject *lengths = NULL, *recvs, *done, *taken, *bodies, *payload_view = NULL, *out = NULL;
	Py_ssize_t i, count;
	unsigned long long at;
	Py_buffer payload;

	recvs = args[4];
	done = args[5];
	taken = args[6];
	bodies = args[7];
	at = PyLong_AsUnsignedLongLong(args[1]);
	i = PyLong_AsSsize_t(args[3]);
	if (PyErr_Occurred())
		return NULL;
	if (!PyList_Check(done) || !PyList_Check(taken) || !PyList_Check(bodies) || i < 0) {
		PyErr_SetString(PyExc_TypeError, "done, taken and bodies must be lists");
		return NULL;
	}
	lengths = PySequence_Fast(args[2], "lengths must be a sequence");
	if (!lengths)
		return NULL;
	if (PyObject_GetBuffer(args[0], &payload, PyBUF_SIMPLE) < 0) {
		Py_DECREF(lengths);
		return NULL;
	}
	payload_view = PyMemoryView_FromObject(args[0]);
	if (!payload_view)
		goto fail;
	count = PySequence_Fast_GET_SIZE(lengths);
	for (; i < count; i++) {
		PyObject *recv, *cookie = NULL, *row, *body;
		unsigned long long n, address = 0, pid = 0;
		int failed;

		if (!as_u64(PySequence_Fast_GET_ITEM(lengths, i), &n) || at > (unsigned long long)payload.len ||
		    n > (unsigned long long)payload.len - at) {
			PyErr_SetString(PyExc_ValueError, "a Send outside the payload");
			goto fail;
		}
		if (PyObject_Length(recvs) <= 0) {
			PyErr_Clear();
			break;
		}
		recv = PySequence_GetItem(recvs, 0);
		if (!recv)
			goto fail;
		if (!plan) {
			PyObject *view = common_receive(recv, n, &cookie);

			if (view) {
				memcpy(PyMemoryView_GET_BUFFER(view)->buf, (const char *)payload.buf + at,
				       (size_t)n);
				Py_DECREF(view);
			}
		} else {
			cookie = process_receive(recv, n, plan, &address, &pid);
			if (cookie && n && !add_piece(plan->pieces, address, at, n)) {
				Py_DECREF(cookie);
				Py_DECREF(recv);
				goto fail;
			}
			if (cookie)
				plan->pid = pid;
		}
		if (!cookie) {
			Py_DECREF(recv);
			break;
		}
		row = Py_BuildValue("(iOK)", 0, cookie, n);
		body = PySequence_GetSlice(payload_view, (Py_ssize_t)at, (Py_ssize_t)(at + n));
		failed = !row || !body || PyList_Append(done, row) || PyList_Append(taken, recv) ||
			 PyList_Append(bodies, body);
		Py_XDECREF(row);
		Py_XDECREF(body);
		Py_DECREF(cookie);
		Py_DECREF(recv);
		if (failed)
			goto fail;
		{
			PyObject *left = PyObject_CallMethodNoArgs(recvs, s_popleft);
			if (!left)
				goto fail;
			Py_DECREF(left);
		}
		at += n;
	}
	out = plan ? Py_BuildValue("(nKK)", i, at, plan->pid) : Py_BuildValue("(nK)", i, at);
fail:
	Py_XDECREF(payload_view);
	PyBuffer_Release(&payload);
	Py_DECREF(lengths);
	return out;
}

/* sends(payload, at, lengths, i, recvs, done, taken, bodies) -> (i, at)
 *
 * ``land_sends`` into the common receives in shared memory: each Send's bytes copied in. */
static PyObject *sends(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
	(void)self;
	if (nargs != 8) {
		PyErr_SetString(PyExc_TypeError, "sends() takes 8 arguments");
		return NULL;
	}
	return land_sends(args, NULL);
}

/* planned(payload, at, lengths, i, recvs, done, taken, bodies, pid, pieces) -> (i, at, pid)
 *
 * ``land_sends`` into receives of one segment in the memory of process ``pid`` (0: the first
 * receive's): each Send's bytes planned for its receive's address on ``pieces``
 * (procmem.add_piece's rule), for Target._received to write in one system call. */
static PyObject *planned(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
	struct plan plan;

	(void)self;
	if (nargs != 10 || !PyList_Check(args[9])) {
		PyErr_SetString(PyExc_TypeError, "planned() takes 10 arguments, pieces a list");
		return NULL;
	}
	if (!as_u64(args[8], &plan.pid)) {
		PyErr_SetString(PyExc_TypeError, "planned(): pid is a u64");
		return NULL;
	}
	plan.pieces = args[9];
	return land_sends(args, &plan);
}

static PyMethodDef methods[] = {
	{"sends", (PyCFunction)(void (*)(void))sends, METH_FASTCALL,
	 "Sends of a batch landed in the EP's common receives, in order."},
	{"planned", (PyCFunction)(void (*)(void))planned, METH_FASTCALL,
	 "Sends of a batch planned for the EP's receives in a process's memory, in order."},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
	PyModuleDef_HEAD_INIT, "fabricd._receives",
	"Where the Sends of a batch land, in C.", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__receives(void)
{
	static const char *names[] = {"cookie", "views", "capacity", "spans", "popleft", "freed", "pid"};
	PyObject **slots[] = {&s_cookie, &s_views, &s_capacity, &s_spans, &s_popleft, &s_freed, &s_pid};

	for (size_t i = 0; i < sizeof slots / sizeof *slots; i++) {
		*slots[i] = PyUnicode_InternFromString(names[i]);
		if (!*slots[i])
			return NULL;
	}
	return PyModule_Create(&module);
}
