/* fabricd._landing: where a batch of RDMA Writes lands, in C (remote_access.write_targets is
 * its caller and holds the rules).
 *
 * views() answers the common batch only: every Write new, under the one key whose checks the
 * caller made (MemoryRegistry.reach), not empty and inside the key's range. It gives each
 * Write's target bytes as a memoryview of the key's LMR; for any other batch it declines
 * (None), and the caller's loop, Write by Write, says which Write fails and how. So this
 * module can only decline work; it never decides an error. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdbool.h>

/* An exact, non-negative int that fits a u64; false (no exception left) otherwise. */
static bool as_u64(PyObject *o, unsigned long long *out)
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

static PyMethodDef methods[] = {
	{"views", (PyCFunction)(void (*)(void))views, METH_FASTCALL,
	 "The target bytes of a batch of RDMA Writes under one key, or None."},
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
