/* fabricd._landing: where a batch of RDMA Writes lands, in C (remote_access.write_targets and
 * stored_writes are its callers and hold the rules).
 *
 * views() answers the common batch of Writes only: every Write new, under the one key whose
 * checks the caller made (MemoryRegistry.reach), not empty and inside the key's range. It
 * gives each Write's target bytes as a memoryview of the key's LMR; for any other batch it
 * declines (None), and the caller's loop, Write by Write, says which Write fails and how.
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
	{"ranges", (PyCFunction)(void (*)(void))ranges, METH_FASTCALL,
	 "The merged byte ranges a batch's Writes under one key touch, or None."},
	{"merge", merge, METH_O, "(start, end) pairs sorted and merged where they meet."},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
	PyModuleDef_HEAD_INIT, "fabricd._landing",
	"Where a batch of RDMA Writes lands, in C.", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__landing(void)
{
	return PyModule_Create(&module);
}
