/* proto._pack: the headers of the data path's frames, whose fields are all unsigned ints (an
 * ACK, a WRITE, a READ_REQ, a READ_RESP), framed as proto.codec.encode frames any header: a
 * 4-byte big-endian length, then the msgpack array [type, payload_len, fields...], here packed
 * by msgpack-c (libmsgpack-dev's pack.h, through proto/pack_u64.h) into one bytes object.
 * Byte for byte what codec.encode makes of the same ints (tests/unit/test_pack.py); a window-1
 * round trip makes two of them, each ~1.8 us through the msgpack package in the daemon (its
 * cache cold). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "pack_u64.h"

/* The framed header of ``count`` items into ``p``: ``first`` (when not NULL: the payload's
 * length, packed second), then ``items``, each an int from 0 to 2**64 - 1 (an IntEnum member
 * too: FrameType). False with TypeError for anything else or more than PACK_MAX_ITEMS items,
 * OverflowError for an int outside that range. */
static bool pack_header(struct packed *p, PyObject *const *items, Py_ssize_t count,
			const unsigned long long *payload_len)
{
	Py_ssize_t all = count + (payload_len != NULL), at = 0;
	unsigned long long ints[PACK_MAX_ITEMS];

	if (count < 1 || all < 2 || all > PACK_MAX_ITEMS) {
		PyErr_SetString(PyExc_TypeError, "a header of a type, a payload length, 0-6 fields");
		return false;
	}
	for (Py_ssize_t i = 0; i < count; i++) {
		if (!PyLong_Check(items[i])) {
			PyErr_SetString(PyExc_TypeError, "every item of the header is an int");
			return false;
		}
		ints[at] = PyLong_AsUnsignedLongLong(items[i]);
		if (ints[at++] == (unsigned long long)-1 && PyErr_Occurred())
			return false; /* OverflowError: negative, or past u64 */
		if (!i && payload_len)
			ints[at++] = *payload_len;
	}
	if (!pack_u64s(p, ints, (size_t)all)) {
		PyErr_SetString(PyExc_SystemError, "the header outgrew its buffer");
		return false;
	}
	return true;
}

/* ints(type, payload_len, *fields) -> bytes
 *
 * The framed header [type, payload_len, *fields] (``pack_header``'s rules). */
static PyObject *ints(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
	struct packed p;

	(void)self;
	if (!pack_header(&p, args, nargs, NULL))
		return NULL;
	return PyBytes_FromStringAndSize(p.bytes, (Py_ssize_t)p.len);
}

/* framed(payload, type, *fields) -> bytes
 *
 * A whole frame in one bytes object: the framed header [type, len(payload), *fields]
 * (``pack_header``'s rules), then a copy of ``payload`` (any contiguous buffer). A small
 * request's frame then leaves as one buffer, with nothing to join at the flush. */
static PyObject *framed(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
	struct packed p;
	Py_buffer payload;
	unsigned long long length;
	PyObject *out = NULL;

	(void)self;
	if (nargs < 2) {
		PyErr_SetString(PyExc_TypeError, "framed() takes a payload, a type, 0-6 fields");
		return NULL;
	}
	if (PyObject_GetBuffer(args[0], &payload, PyBUF_SIMPLE))
		return NULL;
	length = (unsigned long long)payload.len;
	if (pack_header(&p, args + 1, nargs - 1, &length)) {
		out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)p.len + payload.len);
		if (out) {
			memcpy(PyBytes_AS_STRING(out), p.bytes, p.len);
			memcpy(PyBytes_AS_STRING(out) + p.len, payload.buf, (size_t)payload.len);
		}
	}
	PyBuffer_Release(&payload);
	return out;
}

static PyMethodDef methods[] = {
	{"ints", (PyCFunction)(void (*)(void))ints, METH_FASTCALL,
	 "A framed header whose type, payload length and fields are all u64s."},
	{"framed", (PyCFunction)(void (*)(void))framed, METH_FASTCALL,
	 "A whole frame: a header of u64s, then a copy of the payload."},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
	PyModuleDef_HEAD_INIT, "proto._pack",
	"Frame headers of unsigned ints, packed by msgpack-c.", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__pack(void)
{
	return PyModule_Create(&module);
}
