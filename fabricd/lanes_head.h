/* fabricd/lanes_head.h: what every lane of fabricd/_lanes.c (its only includer) reads first:
 * the byte buffer and the range of it a lane is given, and the header of the frame at the
 * range's head, decoded by the msgpack package the codec uses (proto.codec.decode_header;
 * PyInit__lanes binds ``unpackb``). Included once, after Python.h. */
#ifndef FABRICD_LANES_HEAD_H
#define FABRICD_LANES_HEAD_H

#include <stdbool.h>

#include "pyu64.h"

static PyObject *unpackb;

/* A writable, contiguous byte buffer's Py_buffer, or NULL (no exception left). */
static Py_buffer *byte_buffer(PyObject *view, bool writable)
{
	Py_buffer *b;

	if (!PyMemoryView_Check(view))
		return NULL;
	b = PyMemoryView_GET_BUFFER(view);
	if ((writable && b->readonly) || b->ndim != 1 || b->itemsize != 1 ||
	    (b->strides && b->strides[0] != 1))
		return NULL;
	return b;
}

/* The arguments both lanes start with: (buffer, start, end); false with TypeError set when
 * they are not a byte buffer and a range in it. */
static bool lane_range(PyObject *const *args, Py_buffer **buf, Py_ssize_t *start, Py_ssize_t *end)
{
	*start = PyLong_AsSsize_t(args[1]);
	*end = PyLong_AsSsize_t(args[2]);
	if (PyErr_Occurred())
		return false;
	*buf = byte_buffer(args[0], false);
	if (!*buf || *start < 0 || *start > *end || *end > (*buf)->len) {
		PyErr_SetString(PyExc_TypeError, "a lane takes a byte buffer and a range in it");
		return false;
	}
	return true;
}

/* The header of the frame at buf[start:end]'s head when it is whole and is ``count`` exact
 * u64s (into ``fields``; where its payload starts into ``head``): the list the codec's msgpack
 * decoded it into (a new reference). NULL when it is not, with no exception left, unless one
 * was raised that is not the header's (``failed``). */
static PyObject *header_at(const Py_buffer *buf, Py_ssize_t start, Py_ssize_t end,
			   unsigned long long max_header, unsigned long long *fields, Py_ssize_t count,
			   Py_ssize_t *head, bool *failed)
{
	const unsigned char *at = (const unsigned char *)buf->buf + start;
	unsigned long long hlen;
	PyObject *raw, *obj;

	*failed = false;
	if (end - start <= 4)
		return NULL;
	hlen = (unsigned long long)at[0] << 24 | (unsigned long long)at[1] << 16 |
	       (unsigned long long)at[2] << 8 | at[3];
	if (!hlen || hlen > max_header || hlen > (unsigned long long)(end - start - 4))
		return NULL;
	raw = PyMemoryView_FromMemory((char *)at + 4, (Py_ssize_t)hlen, PyBUF_READ);
	if (!raw) {
		*failed = true;
		return NULL;
	}
	obj = PyObject_CallOneArg(unpackb, raw);
	Py_DECREF(raw);
	if (!obj || !PyList_CheckExact(obj) || PyList_GET_SIZE(obj) != count)
		goto not_it;
	for (Py_ssize_t i = 0; i < count; i++)
		if (!as_u64(PyList_GET_ITEM(obj, i), &fields[i]))
			goto not_it;
	*head = start + 4 + (Py_ssize_t)hlen;
	return obj;
not_it:
	Py_XDECREF(obj);
	PyErr_Clear();
	return NULL;
}

#endif
