/* fabricd/pyu64.h: the one argument check the daemon's C extensions (_landing.c, _lanes.c,
 * _receives.c, _plaintake.c) share. Included once per extension, after Python.h. */
#ifndef FABRICD_PYU64_H
#define FABRICD_PYU64_H

#include <stdbool.h>

/* An exact, non-negative int that fits a u64; false (no exception left) otherwise. */
static inline bool as_u64(PyObject *o, unsigned long long *out)
{
	if (!PyLong_CheckExact(o))
		return false;
	*out = PyLong_AsUnsignedLongLong(o);
	if (*out == (unsigned long long)-1 && PyErr_Occurred()) {
		PyErr_Clear();
		return false;
	}
	return true;
}

#endif
