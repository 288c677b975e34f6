/* fabricd._landing: where a batch of RDMA Writes or Sends lands, in C (remote_access.write_targets
 * and Target._sends are its callers and hold the rules).
 *
 * views() answers the common batch of Writes only: every Write new, under the one key whose
 * checks the caller made (MemoryRegistry.reach), not empty and inside the key's range. It
 * gives each Write's target bytes as a memoryview of the key's LMR; for any other batch it
 * declines (None), and the caller's loop, Write by Write, says which Write fails and how.
 * sends() lands Sends of a batch in the EP's receives for as long as the next receive is the
 * common one (one buffer in shared memory that holds the Send) and stops before any other;
 * planned() takes the receives of one segment in a C program's memory the same way, planning
 * each Send's bytes for its receive (written when the run ends: Target._received).
 * ranges() gives the bytes a batch's Writes under one key touch in a process's memory, merged
 * (remote_access.stored_writes); merge() merges such ranges (MemoryRegistry's spans).
 * So this module can only decline work; it never decides an error. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdbool.h>
#include <stdlib.h>

#include "pyu64.h"

/* views(ops, rmr_context, start, end, origin, target) -> list[memoryview] | None
 *
 * ``ops``: the batch's (address, rmr_context, length) tuples (proto.batch.parse_writes);
 * [start, end): the key's range; ``origin``: the address of target[0]. */
static PyObject *views(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
	unsigned long long key, start, end, origin;
	Py_ssize_t count, target_bytes;
	PyObject *ops, *target, *out;

	(void)self;
	if (nargs != 6) {
		PyErr_SetString(PyExc_TypeError, "views() takes 6 arguments");
		return NULL;
	}
	ops = args[0];
	target = args[5];
	if (!PyList_Check(ops) || !PyMemoryView_Check(target)) {
		PyErr_SetString(PyExc_TypeError, "views(): ops must be a list, target a memoryview");
		return NULL;
	}
	if (!as_u64(args[1], &key) || !as_u64(args[2], &start) || !as_u64(args[3], &end) ||
	    !as_u64(args[4], &origin))
		Py_RETURN_NONE;
	target_bytes = PyObject_Length(target);
	if (target_bytes < 0)
		return NULL;
	/* the range must lie inside the target, so every slice below does too */
	if (start > end || start < origin || end - origin > (unsigned long long)target_bytes)
		Py_RETURN_NONE;
	count = PyList_GET_SIZE(ops);
	out = PyList_New(count);
	if (!out)
		return NULL;
	for (Py_ssize_t i = 0; i < count; i++) {
		PyObject *op = PyList_GET_ITEM(ops, i), *view;
		unsigned long long address, context, length;

		if (!PyTuple_CheckExact(op) || PyTuple_GET_SIZE(op) != 3 ||
		    !as_u64(PyTuple_GET_ITEM(op, 0), &address) ||
		    !as_u64(PyTuple_GET_ITEM(op, 1), &context) ||
		    !as_u64(PyTuple_GET_ITEM(op, 2), &length) || context != key || !length ||
		    address < start || address > end || length > end - address) {
			Py_DECREF(out);
			Py_RETURN_NONE;
		}
		view = PySequence_GetSlice(target, (Py_ssize_t)(address - origin),
					   (Py_ssize_t)(address - origin + length));
		if (!view) {
			Py_DECREF(out);
			return NULL;
		}
		PyList_SET_ITEM(out, i, view);
	}
	return out;
}

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
		PyErr_SetString(PyExc_TypeError, "sends(): done, taken and bodies are lists");
		return NULL;
	}
	lengths = PySequence_Fast(args[2], "sends(): lengths is a sequence");
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
			PyErr_SetString(PyExc_ValueError, "sends(): a Send outside the payload");
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

/* A byte range [start, end) of a process's memory that Writes touched. */
struct range {
	unsigned long long start, end;
};

static int by_start(const void *a, const void *b)
{
	const struct range *x = a, *y = b;

	return (x->start > y->start) - (x->start < y->start);
}

/* ``r[0..n)`` sorted and merged where they overlap or touch: a new list of (start, end). */
static PyObject *merged(struct range *r, Py_ssize_t n)
{
	PyObject *out = PyList_New(0);

	qsort(r, (size_t)n, sizeof *r, by_start);
	for (Py_ssize_t i = 0; out && i < n;) {
		unsigned long long start = r[i].start, end = r[i].end;
		PyObject *pair;

		for (i++; i < n && r[i].start <= end; i++)
			if (r[i].end > end)
				end = r[i].end;
		pair = Py_BuildValue("(KK)", start, end);
		if (!pair || PyList_Append(out, pair))
			Py_CLEAR(out);
		Py_XDECREF(pair);
	}
	return out;
}

/* ranges(ops, rmr_context) -> list[(start, end)] | None
 *
 * The bytes a batch's Writes under one key touch (``ops``: (address, rmr_context, length)
 * tuples, proto.batch.parse_writes), merged (``merged``); the empty ones touch none. None when
 * a Write is under another key, or its range passes 2**64: the caller's loop takes those. */
static PyObject *ranges(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
	unsigned long long key;
	Py_ssize_t count, n = 0;
	struct range *r;
	PyObject *out = Py_None;

	(void)self;
	if (nargs != 2 || !PyList_Check(args[0])) {
		PyErr_SetString(PyExc_TypeError, "ranges() takes a list of Writes and a key");
		return NULL;
	}
	if (!as_u64(args[1], &key))
		Py_RETURN_NONE;
	count = PyList_GET_SIZE(args[0]);
	r = PyMem_Malloc((size_t)(count ? count : 1) * sizeof *r);
	if (!r)
		return PyErr_NoMemory();
	for (Py_ssize_t i = 0; i < count; i++) {
		PyObject *op = PyList_GET_ITEM(args[0], i);
		unsigned long long address, context, length;

		if (!PyTuple_CheckExact(op) || PyTuple_GET_SIZE(op) != 3 ||
		    !as_u64(PyTuple_GET_ITEM(op, 0), &address) ||
		    !as_u64(PyTuple_GET_ITEM(op, 1), &context) ||
		    !as_u64(PyTuple_GET_ITEM(op, 2), &length) || context != key ||
		    length > ~0ULL - address)
			goto done;
		if (length)
			r[n++] = (struct range){address, address + length};
	}
	out = merged(r, n);
done:
	PyMem_Free(r);
	if (out == Py_None)
		Py_INCREF(out);
	return out;
}

/* merge(pairs) -> list[(start, end)]
 *
 * (start, end) pairs, start <= end, merged (``merged``): MemoryRegistry's spans of one LMR. */
static PyObject *merge(PyObject *self, PyObject *pairs)
{
	Py_ssize_t count;
	struct range *r;
	PyObject *out = NULL;

	(void)self;
	if (!PyList_Check(pairs)) {
		PyErr_SetString(PyExc_TypeError, "merge() takes a list of (start, end) pairs");
		return NULL;
	}
	count = PyList_GET_SIZE(pairs);
	r = PyMem_Malloc((size_t)(count ? count : 1) * sizeof *r);
	if (!r)
		return PyErr_NoMemory();
	for (Py_ssize_t i = 0; i < count; i++) {
		PyObject *pair = PyList_GET_ITEM(pairs, i);

		if (!PyTuple_CheckExact(pair) || PyTuple_GET_SIZE(pair) != 2 ||
		    !as_u64(PyTuple_GET_ITEM(pair, 0), &r[i].start) ||
		    !as_u64(PyTuple_GET_ITEM(pair, 1), &r[i].end) || r[i].start > r[i].end) {
			PyErr_SetString(PyExc_TypeError, "merge(): pairs of u64s, start <= end");
			goto done;
		}
	}
	out = merged(r, count);
done:
	PyMem_Free(r);
	return out;
}

static PyMethodDef methods[] = {
	{"views", (PyCFunction)(void (*)(void))views, METH_FASTCALL,
	 "The target bytes of a batch of RDMA Writes under one key, or None."},
	{"sends", (PyCFunction)(void (*)(void))sends, METH_FASTCALL,
	 "Sends of a batch landed in the EP's common receives, in order."},
	{"planned", (PyCFunction)(void (*)(void))planned, METH_FASTCALL,
	 "Sends of a batch planned for the EP's receives in a process's memory, in order."},
	{"ranges", (PyCFunction)(void (*)(void))ranges, METH_FASTCALL,
	 "The merged byte ranges a batch's Writes under one key touch, or None."},
	{"merge", merge, METH_O, "(start, end) pairs sorted and merged where they meet."},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
	PyModuleDef_HEAD_INIT, "fabricd._landing",
	"Where a batch of RDMA Writes or Sends lands, in C.", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__landing(void)
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
