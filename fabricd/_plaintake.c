/* fabricd._plaintake: the daemon's intake of the common WQE in C (docs/host-interface.md
 * section 4; Initiator.post_plain and Target.post_recv_plain its callers, proto/plainwqe.py its
 * rules in Python).
 *
 * take() (requests) and receives() read a stretch of a work queue's slots, copy each slot
 * before looking at it (the driver may write there at any moment: what is checked is what is
 * used), and accept the common WQE (one of ``opcodes``, one segment, no operands; its bytes in
 * that segment or staged inside the staging area, unfenced) whose segment passes every check
 * of a local iov: not empty, a key of this consumer's in this PZ, with the privilege needed,
 * the bytes inside its range, and (for requests) memory the daemon maps: the bytes of a
 * request in a process's own memory are fetched by the general path. They stop before the
 * first WQE that is anything else, and take nothing off the ring: the caller publishes what
 * it queues, and the general path (hostif.read_wqe, Initiator.post, Target.post_recv) takes
 * the WQE they stopped at and names what is wrong with it. So this module can only decline
 * work; it never decides an error. fence() is the daemon's full barrier (ShmMapper.fence). */
#include <stdatomic.h>

#include "plaintake_walk.h"

#define MAX_OP_BYTES (16u * 1024u) /* proto.batch.MAX_OP_BYTES: larger ones go alone */
#define PLAIN_FIELDS 14 /* plainwqe.PlainWqe */

/* view[lo:hi] as a new memoryview of the same buffer (it keeps the buffer's exporter alive). */
static PyObject *slice_of(PyObject *view, Py_ssize_t lo, Py_ssize_t hi)
{
	return PySequence_GetSlice(view, lo, hi);
}

/* The slot's fields in plainwqe.PlainWqe's order, as a tuple of ints. */
static PyObject *fields_of(const struct df_wqe *w, const struct df_wqe_segment *s)
{
	PyObject *t = PyTuple_New(PLAIN_FIELDS);
	unsigned long long v[PLAIN_FIELDS] = {
		w->opcode,	   w->wqe_flags,    w->num_segments,	w->completion_flags,
		w->user_cookie,	   w->remote_address, w->remote_length, w->rmr_context,
		w->stage_offset, w->operand,	    w->compare,		s->virtual_address,
		s->segment_length, s->lmr_context,
	};

	if (!t)
		return NULL;
	for (int i = 0; i < PLAIN_FIELDS; i++) {
		PyObject *n = PyLong_FromUnsignedLongLong(v[i]);
		if (!n) {
			Py_DECREF(t);
			return NULL;
		}
		PyTuple_SET_ITEM(t, i, n);
	}
	return t;
}

struct run {
	PyObject *wqes, *views;
	unsigned long long total;
	bool mixed;
	int kind;
};

/* Queue one accepted WQE's fields and bytes onto the run (``to``); false on a Python error. */
static bool add_to_run(void *to, const struct df_wqe *w, const struct df_wqe_segment *s,
		       const struct key *key, PyObject *stage)
{
	struct run *run = to;
	unsigned long long n = s->segment_length;
	PyObject *fields, *bytes;
	int failed;

	if (w->wqe_flags)
		bytes = slice_of(stage, (Py_ssize_t)w->stage_offset, (Py_ssize_t)(w->stage_offset + n));
	else
		bytes = slice_of(key->view, (Py_ssize_t)(s->virtual_address - key->start),
				 (Py_ssize_t)(s->virtual_address - key->start + n));
	if (!bytes)
		return false;
	fields = fields_of(w, s);
	if (!fields) {
		Py_DECREF(bytes);
		return false;
	}
	failed = PyList_Append(run->wqes, fields) || PyList_Append(run->views, bytes);
	Py_DECREF(fields);
	Py_DECREF(bytes);
	if (failed)
		return false;
	if (run->kind < 0)
		run->kind = w->opcode;
	run->total += n;
	/* runs.group's rule, one kind for the whole run */
	run->mixed = run->mixed || w->opcode != run->kind || n > MAX_OP_BYTES ||
		     (w->completion_flags & FLAG_FENCE);
	return true;
}

/* take() and receives() are given 11 arguments; false with TypeError if not. */
static bool arity(Py_ssize_t nargs, const char *name)
{
	if (nargs == 11)
		return true;
	PyErr_Format(PyExc_TypeError, "%s() takes 11 arguments", name);
	return false;
}

/* take(ring, at, count, entry_size, opcodes, lmrs, owner, pz, need, before, stage)
 *      -> (wqes, views, total, mixed, lmr)
 *
 * The common requests of ``count`` slots of ``entry_size`` bytes from byte ``at`` of ``ring``
 * (a memoryview), up to the first that is not one or whose segment fails (see the top):
 * their fields (plainwqe.PlainWqe each), their bytes (memoryviews into the LMR's view, or into
 * ``stage`` when staged), their total length, whether the run mixes kinds, sizes or fences
 * (runs.queue), and the LMR whose checks passed last, which the next call may pass as
 * ``before`` (a hint: every segment is still checked against its range).
 * ``lmrs`` maps lmr_context to LMR; ``need`` is the privilege bits a segment's LMR must grant. */
static PyObject *take(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
	struct run run = {NULL, NULL, 0, false, -1};
	PyObject *lmr, *out = NULL;
	Py_ssize_t stage_bytes;

	(void)self;
	if (!arity(nargs, "take"))
		return NULL;
	if (!PyMemoryView_Check(args[10])) {
		PyErr_SetString(PyExc_TypeError, "take(): stage must be a memoryview");
		return NULL;
	}
	stage_bytes = PyObject_Length(args[10]);
	if (stage_bytes < 0)
		return NULL;
	run.wqes = PyList_New(0);
	run.views = PyList_New(0);
	if (run.wqes && run.views &&
	    (lmr = walk_args(args, args[10], stage_bytes, false, add_to_run, &run)))
		out = Py_BuildValue("(OOKON)", run.wqes, run.views, run.total,
				    run.mixed ? Py_True : Py_False, lmr);
	Py_XDECREF(run.wqes);
	Py_XDECREF(run.views);
	return out;
}

/* Where receives() puts what it makes. */
struct made {
	PyObject *list, *make;
};

/* One receive made as ``make(cookie, flags, [view], length, spans)`` (objects.Recv): its
 * bytes are its LMR's view, its spans [(lmr, address, length)] when they lie in a process's own
 * memory (stored there when a Send fills it), else none. */
static bool add_receive(void *to, const struct df_wqe *w, const struct df_wqe_segment *s,
			const struct key *key, PyObject *stage)
{
	struct made *made = to;
	unsigned long long n = s->segment_length, at = s->virtual_address - key->start;
	PyObject *a[5], *recv = NULL;
	int failed = 1;

	(void)stage;
	a[0] = PyLong_FromUnsignedLongLong(w->user_cookie);
	a[1] = PyLong_FromUnsignedLongLong(w->completion_flags);
	a[2] = Py_BuildValue("[N]", slice_of(key->view, (Py_ssize_t)at, (Py_ssize_t)(at + n)));
	a[3] = PyLong_FromUnsignedLongLong(n);
	a[4] = key->pid ? Py_BuildValue("[(OKK)]", key->lmr, s->virtual_address, n) : PyList_New(0);
	if (a[0] && a[1] && a[2] && a[3] && a[4])
		recv = PyObject_Vectorcall(made->make, a, 5, NULL);
	if (recv)
		failed = PyList_Append(made->list, recv);
	Py_XDECREF(recv);
	for (int i = 0; i < 5; i++)
		Py_XDECREF(a[i]);
	return !failed;
}

/* receives(ring, at, count, entry_size, opcodes, lmrs, owner, pz, need, before, make)
 *      -> (recvs, lmr)
 *
 * take() for receives (Target.post_recv_plain): a receive into a process's own memory is
 * taken too, and every one of a call is under one key, the returned LMR; the next call goes
 * on from the receive under another. Each is made by ``make`` (add_receive), ready to queue. */
static PyObject *receives(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
	struct made made = {NULL, NULL};
	PyObject *lmr, *out = NULL;

	(void)self;
	if (!arity(nargs, "receives"))
		return NULL;
	if (!PyCallable_Check(args[10])) {
		PyErr_SetString(PyExc_TypeError, "receives(): make must be callable");
		return NULL;
	}
	made.make = args[10];
	made.list = PyList_New(0);
	if (made.list && (lmr = walk_args(args, NULL, 0, true, add_receive, &made)))
		out = Py_BuildValue("(ON)", made.list, lmr);
	Py_XDECREF(made.list);
	return out;
}

/* fence() -> None
 *
 * A full memory barrier (ShmMapper.fence: the intake's last look after POLL 0, NOTIFY's check
 * after an index store): our earlier stores to the shared rings are visible before our later
 * loads, the one reordering x86-64 allows. One C call where an uncontended lock's acquire and
 * release were three Python calls on the daemon's every empty look. */
static PyObject *fence(PyObject *self, PyObject *unused)
{
	(void)self;
	(void)unused;
	atomic_thread_fence(memory_order_seq_cst);
	Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
	{"fence", fence, METH_NOARGS, "A full memory barrier (ShmMapper.fence)."},
	{"take", (PyCFunction)(void (*)(void))take, METH_FASTCALL,
	 "The common requests of a stretch of a send queue's slots, checked (Initiator.post_plain)."},
	{"receives", (PyCFunction)(void (*)(void))receives, METH_FASTCALL,
	 "The plain receives of a stretch of a receive queue's slots, checked and made\n"
	 "(Target.post_recv_plain)."},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
	PyModuleDef_HEAD_INIT, "fabricd._plaintake",
	"The daemon's intake of the common WQE, in C.", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__plaintake(void)
{
	if (!walk_names())
		return NULL;
	return PyModule_Create(&module);
}
