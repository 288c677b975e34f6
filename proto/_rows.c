/* proto._rows: fixed-size entries written from rows of fields, in C: the completions of a run
 * of plain DTOs into an event queue (proto.events.write_rows) and the Write list of a WRITES
 * header (proto.batch). A row is a tuple of ints; the caller names where in it each field is.
 * A field that does not fit its entry raises OverflowError, as struct.pack would refuse it,
 * and nothing is written past the buffer given. The layouts are provider/df-abi.h's and
 * proto/batch.py's. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdbool.h>
#include <string.h>

#include "df-abi.h"

#define SUPPRESS 0x01u /* DAT_COMPLETION_SUPPRESS_FLAG */
#define UNSIGNALLED 0x04u /* DAT_COMPLETION_UNSIGNALLED_FLAG */
#define NOTIFIES 0x01u /* proto.eventq.NOTIFIES */
#define DTO_COMPLETION_EVENT 0x00001u /* DAT_DTO_COMPLETION_EVENT */
#define DTO_SUCCESS 0u

/* Field ``at`` of row ``row`` as an unsigned value of at most ``max``; false with an
 * exception set otherwise. */
static bool field(PyObject *row, Py_ssize_t at, unsigned long long max, unsigned long long *out)
{
	PyObject *v;

	if (!PyTuple_Check(row) || at < 0 || at >= PyTuple_GET_SIZE(row)) {
		PyErr_SetString(PyExc_TypeError, "a row is a tuple holding the fields named");
		return false;
	}
	v = PyTuple_GET_ITEM(row, at);
	if (!PyLong_Check(v)) {
		PyErr_SetString(PyExc_TypeError, "a row's fields are ints");
		return false;
	}
	*out = PyLong_AsUnsignedLongLong(v);
	if (*out == (unsigned long long)-1 && PyErr_Occurred())
		return false;
	if (*out > max) {
		PyErr_SetString(PyExc_OverflowError, "a field does not fit its entry");
		return false;
	}
	return true;
}

/* write_rows(view, mine, mask, entry_size, room, ep, kind, rows, flags_at, cookie_at,
 *            length_at) -> (written, full)
 *
 * The successful completions of ``rows`` (DTOs of one ``kind`` of EP ``ep``) into the event
 * queue ``view`` from its producer index ``mine`` on, at most ``room`` (the caller
 * publishes): SUPPRESS gives none, UNSIGNALLED an entry that does not notify. How many were
 * written, and whether one found no room. */
static PyObject *write_rows(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
	unsigned long long mine, mask, entry_size, room, ep, kind, written = 0;
	Py_ssize_t flags_at, cookie_at, length_at;
	PyObject *seq, *out = NULL;
	bool full = false;
	Py_buffer view;

	(void)self;
	if (nargs != 11) {
		PyErr_SetString(PyExc_TypeError, "write_rows() takes 11 arguments");
		return NULL;
	}
	mine = PyLong_AsUnsignedLongLong(args[1]);
	mask = PyLong_AsUnsignedLongLong(args[2]);
	entry_size = PyLong_AsUnsignedLongLong(args[3]);
	room = PyLong_AsUnsignedLongLong(args[4]);
	ep = PyLong_AsUnsignedLongLong(args[5]);
	kind = PyLong_AsUnsignedLongLong(args[6]);
	flags_at = PyLong_AsSsize_t(args[8]);
	cookie_at = PyLong_AsSsize_t(args[9]);
	length_at = PyLong_AsSsize_t(args[10]);
	if (PyErr_Occurred())
		return NULL;
	if (entry_size < sizeof(struct df_eqe) || ep > UINT32_MAX || kind > UINT32_MAX) {
		PyErr_SetString(PyExc_ValueError, "write_rows(): no such queue entry or completion");
		return NULL;
	}
	seq = PySequence_Fast(args[7], "write_rows(): rows is a sequence");
	if (!seq)
		return NULL;
	if (PyObject_GetBuffer(args[0], &view, PyBUF_WRITABLE) < 0) {
		Py_DECREF(seq);
		return NULL;
	}
	for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
		PyObject *row = PySequence_Fast_GET_ITEM(seq, i);
		unsigned long long flags, cookie, length, at;
		struct df_eqe e;

		if (!field(row, flags_at, UINT32_MAX, &flags))
			goto done;
		if (flags & SUPPRESS)
			continue;
		if (written == room) {
			full = true;
			break;
		}
		if (!field(row, cookie_at, UINT64_MAX, &cookie) ||
		    !field(row, length_at, UINT32_MAX, &length))
			goto done;
		at = sizeof(struct df_ring_hdr) + ((mine + written) & mask) * entry_size;
		if (at > (unsigned long long)view.len || sizeof e > (unsigned long long)view.len - at) {
			PyErr_SetString(PyExc_ValueError, "write_rows(): a slot outside the queue");
			goto done;
		}
		memset(&e, 0, sizeof e);
		e.event_number = DTO_COMPLETION_EVENT;
		e.flags = flags & UNSIGNALLED ? 0 : NOTIFIES;
		e.ep = (uint32_t)ep;
		e.status = DTO_SUCCESS;
		e.cookie = cookie;
		e.length = (uint32_t)length;
		e.aux = (uint32_t)kind;
		memcpy((char *)view.buf + at, &e, sizeof e);
		written++;
	}
	out = Py_BuildValue("(KO)", written, full ? Py_True : Py_False);
done:
	PyBuffer_Release(&view);
	Py_DECREF(seq);
	return out;
}

/* pack_writes(rows, address_at, context_at, length_at) -> bytes: a WRITE_OP (address u64,
 * rmr_context u32, length u32, little-endian) for each row, in order. */
static PyObject *pack_writes(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
	Py_ssize_t address_at, context_at, length_at, count;
	PyObject *seq, *out;
	char *p;

	(void)self;
	if (nargs != 4) {
		PyErr_SetString(PyExc_TypeError, "pack_writes() takes 4 arguments");
		return NULL;
	}
	address_at = PyLong_AsSsize_t(args[1]);
	context_at = PyLong_AsSsize_t(args[2]);
	length_at = PyLong_AsSsize_t(args[3]);
	if (PyErr_Occurred())
		return NULL;
	seq = PySequence_Fast(args[0], "pack_writes(): rows is a sequence");
	if (!seq)
		return NULL;
	count = PySequence_Fast_GET_SIZE(seq);
	out = PyBytes_FromStringAndSize(NULL, count * 16);
	if (!out)
		goto fail;
	p = PyBytes_AS_STRING(out);
	for (Py_ssize_t i = 0; i < count; i++, p += 16) {
		PyObject *row = PySequence_Fast_GET_ITEM(seq, i);
		unsigned long long address, context, length;
		uint32_t words[2];

		if (!field(row, address_at, UINT64_MAX, &address) ||
		    !field(row, context_at, UINT32_MAX, &context) ||
		    !field(row, length_at, UINT32_MAX, &length))
			goto fail;
		words[0] = (uint32_t)context;
		words[1] = (uint32_t)length;
		memcpy(p, &address, 8); /* little-endian, as df-abi.h's layouts */
		memcpy(p + 8, words, 8);
	}
	Py_DECREF(seq);
	return out;
fail:
	Py_XDECREF(out);
	Py_DECREF(seq);
	return NULL;
}

static PyMethodDef methods[] = {
	{"write_rows", (PyCFunction)(void (*)(void))write_rows, METH_FASTCALL,
	 "Successful completions of a run of plain DTOs into an event queue."},
	{"pack_writes", (PyCFunction)(void (*)(void))pack_writes, METH_FASTCALL,
	 "The Write list of a WRITES header."},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
	PyModuleDef_HEAD_INIT, "proto._rows",
	"Fixed-size entries written from rows of fields, in C.", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__rows(void)
{
	return PyModule_Create(&module);
}
