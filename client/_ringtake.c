/* client._ringtake: the Python client's common completion, read from its event queue in C
 * (docs/host-interface.md section 6).
 *
 * client/eventing.py's ClientCore.refill holds the rules; this is its fast path for a run of
 * plain DTO completions (no body, no SRQ receive): each becomes an Event with its own fields
 * set (the others read the class's defaults). The run stops at the first other entry, which
 * the caller then reads and checks in Python. The layout is provider/df-abi.h's. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdatomic.h>
#include <string.h>

#include "df-abi.h"

#define MEAN_MAX 0x100000000LL

static PyObject *s_event_number, *s_evd, *s_ep, *s_cookie, *s_status, *s_length, *s_operation,
	*s_notify, *s_no_args;

/* The running mean of transferred lengths, weight 1/8, as client.records.mean_step: each step
 * moves it at least one toward the length (rounded away from the old mean), so a run of equal
 * lengths reaches that length. */
static long long mean_step(long long mean, long long length)
{
	long long d = length - mean;

	return mean + (d >= 0 ? (d + 7) / 8 : -((-d + 7) / 8));
}

/* One DTO_COMPLETION_EVENT of ``cls`` with the entry's fields set, always in this order (the
 * instances then share one key table). */
static PyObject *completion(PyObject *cls, PyObject *number, PyObject *evd, const struct df_eqe *e)
{
	PyObject *names[] = {s_ep, s_cookie, s_status, s_length, s_operation, s_notify};
	PyObject *values[] = {
		PyLong_FromUnsignedLong(e->ep),     PyLong_FromUnsignedLongLong(e->cookie),
		PyLong_FromUnsignedLong(e->status), PyLong_FromUnsignedLong(e->length),
		PyLong_FromUnsignedLong(e->aux),    PyBool_FromLong(e->flags & DF_EQE_NOTIFIES),
	};
	const size_t n = sizeof(names) / sizeof(names[0]);
	PyObject *event = NULL;
	int failed = 0;

	for (size_t i = 0; i < n; i++)
		failed = failed || !values[i]; /* no call below with an exception pending */
	if (!failed)
		event = PyBaseObject_Type.tp_new((PyTypeObject *)cls, s_no_args, NULL);
	failed = failed || !event || PyObject_SetAttr(event, s_event_number, number) ||
		 PyObject_SetAttr(event, s_evd, evd);
	for (size_t i = 0; i < n; i++) {
		failed = failed || PyObject_SetAttr(event, names[i], values[i]);
		Py_XDECREF(values[i]);
	}
	if (failed) {
		Py_XDECREF(event);
		return NULL;
	}
	return event;
}

static PyObject *completions(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
	PyObject *cls, *number, *evd, *events = NULL, *event, *result = NULL;
	Py_ssize_t first, count, i;
	size_t slots;
	unsigned long raw;
	long long mean;
	long notifies = 0;
	Py_buffer buf;
	struct df_eqe e;

	(void)module;
	if (nargs != 7) {
		PyErr_SetString(PyExc_TypeError, "completions takes 7 arguments");
		return NULL;
	}
	first = PyLong_AsSsize_t(args[1]);
	count = PyLong_AsSsize_t(args[2]);
	cls = args[3];
	number = args[4];
	evd = args[5];
	raw = PyLong_AsUnsignedLong(number);
	mean = PyLong_AsLongLong(args[6]);
	if (PyErr_Occurred())
		return NULL;
	/* The mean is of u32 lengths: bounded, so no step of it overflows. */
	if (!PyType_Check(cls) || first < 0 || count < 0 || mean < 0 || mean > MEAN_MAX) {
		PyErr_SetString(PyExc_ValueError, "completions: a class, two counts and a mean");
		return NULL;
	}
	if (PyObject_GetBuffer(args[0], &buf, PyBUF_SIMPLE) < 0)
		return NULL;
	/* Every slot read lies inside the view: the run [first, first + count) of 512-byte slots
	 * after the ring's three header lines. */
	slots = (size_t)buf.len < sizeof(struct df_ring_hdr)
			? 0
			: ((size_t)buf.len - sizeof(struct df_ring_hdr)) / DF_EQ_ENTRY_SIZE;
	if ((size_t)first > slots || (size_t)count > slots - (size_t)first) {
		PyErr_SetString(PyExc_ValueError, "completions: slots past the ring");
		goto out;
	}
	events = PyList_New(0);
	if (!events)
		goto out;
	/* Acquire: the caller read the daemon's producer index, which covers these slots; their
	 * contents are read after it (the daemon stored them before the index, with release). */
	atomic_thread_fence(memory_order_acquire);
	for (i = 0; i < count; i++) {
		memcpy(&e, (const char *)buf.buf + sizeof(struct df_ring_hdr) +
				   (size_t)(first + i) * DF_EQ_ENTRY_SIZE,
		       sizeof(e));
		if (e.event_number != raw || e.rsvd || e.body_length || e.flags & DF_EQE_SRQ_RECEIVE)
			break; /* the caller reads this one (and checks it) */
		event = completion(cls, number, evd, &e);
		if (!event || PyList_Append(events, event) < 0) {
			Py_XDECREF(event);
			goto out;
		}
		Py_DECREF(event);
		notifies += e.flags & DF_EQE_NOTIFIES;
		mean = mean_step(mean, e.length);
	}
	result = Py_BuildValue("(OlL)", events, notifies, mean);
out:
	Py_XDECREF(events);
	PyBuffer_Release(&buf);
	return result;
}

static PyMethodDef methods[] = {
	{"completions", (PyCFunction)(void (*)(void))completions, METH_FASTCALL,
	 "completions(view, first, count, cls, number, evd, mean): the plain DTO completions in "
	 "slots first.. of the event queue ``view``, up to ``count`` or the first other entry; "
	 "(events, how many notify, the running mean of their lengths)."},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
	PyModuleDef_HEAD_INIT, "client._ringtake", "The Python client's common completion, in C.",
	-1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__ringtake(void)
{
	struct {
		PyObject **slot;
		const char *name;
	} names[] = {
		{&s_event_number, "event_number"},
		{&s_evd, "evd"},
		{&s_ep, "ep"},
		{&s_cookie, "cookie"},
		{&s_status, "status"},
		{&s_length, "transfered_length"},
		{&s_operation, "operation"},
		{&s_notify, "notify"},
	};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		*names[i].slot = PyUnicode_InternFromString(names[i].name);
		if (!*names[i].slot)
			return NULL;
	}
	s_no_args = PyTuple_New(0);
	if (!s_no_args)
		return NULL;
	return PyModule_Create(&module_def);
}
