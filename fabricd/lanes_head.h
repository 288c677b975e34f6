/* fabricd/lanes_head.h: what every lane of fabricd/_lanes.c (its only includer) reads first:
 * the byte buffer and the range of it a lane is given, and the header of the frame at the
 * range's head, decoded by msgpack-c (libmsgpack-dev) without a Python object: a header the
 * msgpack package decoded (proto.codec.decode_header) cost ~1 us of a 64 B Write's round
 * trip at each daemon. Included once, after Python.h. */
#ifndef FABRICD_LANES_HEAD_H
#define FABRICD_LANES_HEAD_H

#include <msgpack.h>
#include <stdbool.h>

#include "pyu64.h"

#define HEADER_ZONE 256 /* bytes: a header's array of up to 8 msgpack_objects (16 bytes each) */

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

/* The header of the frame at buf[start:end]'s head when it is whole and is the msgpack array
 * of ``count`` u64s (decoded by msgpack-c into ``fields``; where its payload starts into
 * ``head``): true. False when it is not (anything else, or bytes after the array); the
 * long way then decodes it, and decides. */
static bool header_at(const Py_buffer *buf, Py_ssize_t start, Py_ssize_t end,
		      unsigned long long max_header, unsigned long long *fields, size_t count,
		      Py_ssize_t *head)
{
	const unsigned char *at = (const unsigned char *)buf->buf + start;
	unsigned long long hlen;
	msgpack_zone zone;
	msgpack_object header = {.type = MSGPACK_OBJECT_NIL}; /* read below only if decoded */
	msgpack_object_array items;
	size_t off = 0;
	bool ok;

	if (end - start <= 4)
		return false;
	hlen = (unsigned long long)at[0] << 24 | (unsigned long long)at[1] << 16 |
	       (unsigned long long)at[2] << 8 | at[3];
	if (!hlen || hlen > max_header || hlen > (unsigned long long)(end - start - 4))
		return false;
	/* a zone of one small chunk for the array (msgpack_unpack_next makes one of 8 KiB and
	 * its own header each call: two mallocs, one of them too large for glibc's tcache) */
	if (!msgpack_zone_init(&zone, HEADER_ZONE))
		return false;
	ok = msgpack_unpack((const char *)at + 4, (size_t)hlen, &off, &zone, &header) ==
		     MSGPACK_UNPACK_SUCCESS &&
	     off == hlen && header.type == MSGPACK_OBJECT_ARRAY && header.via.array.size == count;
	items = header.via.array;
	for (size_t i = 0; ok && i < count; i++) {
		ok = items.ptr[i].type == MSGPACK_OBJECT_POSITIVE_INTEGER;
		fields[i] = items.ptr[i].via.u64;
	}
	msgpack_zone_destroy(&zone);
	if (ok)
		*head = start + 4 + (Py_ssize_t)hlen;
	return ok;
}

#endif
