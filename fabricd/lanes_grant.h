/* fabricd/lanes_grant.h: a key's grant as the lanes of fabricd/_lanes.c (its only includer)
 * read it: the target's Write lane lands under it, its Read lane answers from it. A grant is
 * fabricd/memory.py's Grant (Reach.grant), a tuple the daemon keeps per link and key
 * (fabricd/nic/lane.py). Included once, after Python.h and lanes_head.h. */
#ifndef FABRICD_LANES_GRANT_H
#define FABRICD_LANES_GRANT_H

#include <stdbool.h>

#include "pyu64.h"

/* A grant's items (fabricd/memory.py's Grant, a Reach as the lane reads it). */
enum { G_START, G_END, G_ORIGIN, G_TARGET, G_PID, G_ITEMS };

/* The grant under ``rmr_context`` in ``grants`` (held: the caller releases it) when its range
 * holds [address, +size) inside its target: that target's buffer and the range's offset in
 * it (Reach.covers and Reach.bytes, so a copy there stays in the target); NULL when there is
 * none (an exception only if the look-up raised). */
static PyObject *granted(PyObject *grants, unsigned long long rmr_context,
			 unsigned long long address, unsigned long long size, Py_buffer **target,
			 unsigned long long *offset)
{
	unsigned long long start, end, origin;
	PyObject *key, *grant;

	key = PyLong_FromUnsignedLongLong(rmr_context);
	if (!key)
		return NULL;
	grant = PyDict_GetItemWithError(grants, key);
	Py_DECREF(key);
	if (!grant || !PyTuple_CheckExact(grant) || PyTuple_GET_SIZE(grant) != G_ITEMS ||
	    !as_u64(PyTuple_GET_ITEM(grant, G_START), &start) ||
	    !as_u64(PyTuple_GET_ITEM(grant, G_END), &end) ||
	    !as_u64(PyTuple_GET_ITEM(grant, G_ORIGIN), &origin))
		return NULL;
	*target = byte_buffer(PyTuple_GET_ITEM(grant, G_TARGET), true);
	if (!*target || address < start || address > end || size > end - address || start < origin ||
	    end - origin > (unsigned long long)(*target)->len)
		return NULL;
	*offset = address - origin;
	Py_INCREF(grant);
	return grant;
}

#endif
