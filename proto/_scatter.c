/* proto._scatter: a payload's bytes copied into its sink's views, in C (proto/codec.py's
 * FrameReader is its caller: a batch of small RDMA Writes is a view each).
 *
 * views() turns a sink into the list fill() works on; fill() copies arriving bytes in order.
 * Both check every view they touch (a writable, contiguous byte buffer), so a sink of
 * anything else is a TypeError here, never a write out of place. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <string.h>

static PyObject *s_cast, *s_format_B;

/* The buffer of ``v`` when it is a memoryview of writable, contiguous memory; NULL with a
 * TypeError naming ``who`` otherwise. */
static Py_buffer *writable(PyObject *v, const char *who)
{
	Py_buffer *b;

	if (!PyMemoryView_Check(v)) {
		PyErr_Format(PyExc_TypeError, "%s(): a sink holds memoryviews", who);
		return NULL;
	}
	b = PyMemoryView_GET_BUFFER(v);
	if (b->readonly || !PyBuffer_IsContiguous(b, 'C')) {
		PyErr_Format(PyExc_TypeError, "%s(): a sink's views are writable, contiguous", who);
		return NULL;
	}
	return b;
}

/* views(sink) -> (views, total): the sink's memoryviews as 1-D byte views, the empty ones
 * dropped, and how many bytes they hold. */
static PyObject *views(PyObject *self, PyObject *sink)
{
	PyObject *seq, *out, *result = NULL;
	unsigned long long total = 0;

	(void)self;
	seq = PySequence_Fast(sink, "views(): a sink is a sequence of memoryviews");
	if (!seq)
		return NULL;
	out = PyList_New(0);
	if (!out)
		goto done;
	for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
		PyObject *v = PySequence_Fast_GET_ITEM(seq, i);
		Py_buffer *b = writable(v, "views");
		int failed;

		if (!b)
			goto done;
		if (!b->len)
			continue;
		if (b->ndim == 1 && b->itemsize == 1 && b->format && !strcmp(b->format, "B")) {
			Py_INCREF(v);
		} else {
			v = PyObject_CallMethodOneArg(v, s_cast, s_format_B);
			if (!v)
				goto done;
		}
		total += (unsigned long long)b->len;
		failed = PyList_Append(out, v);
		Py_DECREF(v);
		if (failed)
			goto done;
	}
	result = Py_BuildValue("(OK)", out, total);
done:
	Py_XDECREF(out);
	Py_DECREF(seq);
	return result;
}

/* fill(views, src) -> int: copy ``src`` into the list's views from its head, in order; the
 * views filled leave the list, one filled in part is replaced by its rest. How many bytes of
 * ``src`` went in (fewer than all when the views ran out). */
static PyObject *fill(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
	PyObject *list;
	Py_buffer src;
	Py_ssize_t at = 0, filled = 0, count;

	(void)self;
	if (nargs != 2 || !PyList_Check(args[0])) {
		PyErr_SetString(PyExc_TypeError, "fill(views: list, src)");
		return NULL;
	}
	list = args[0];
	if (PyObject_GetBuffer(args[1], &src, PyBUF_SIMPLE) < 0)
		return NULL;
	count = PyList_GET_SIZE(list);
	while (at < src.len && filled < count) {
		PyObject *head = PyList_GET_ITEM(list, filled);
		Py_buffer *b = writable(head, "fill");
		Py_ssize_t n;

		if (!b)
			goto fail;
		if (b->ndim != 1 || b->itemsize != 1) {
			PyErr_SetString(PyExc_TypeError, "fill(): views are bytes (views() casts them)");
			goto fail;
		}
		n = b->len < src.len - at ? b->len : src.len - at;
		memmove(b->buf, (const char *)src.buf + at, (size_t)n);
		at += n;
		if (n == b->len) {
			filled++;
		} else {
			PyObject *rest = PySequence_GetSlice(head, n, b->len);
			if (!rest)
				goto fail;
			PyList_SetItem(list, filled, rest); /* steals rest, drops the old head */
		}
	}
	if (filled && PyList_SetSlice(list, 0, filled, NULL) < 0)
		goto fail;
	PyBuffer_Release(&src);
	return PyLong_FromSsize_t(at);
fail:
	PyBuffer_Release(&src);
	return NULL;
}

static PyMethodDef methods[] = {
	{"views", views, METH_O, "A sink's views as 1-D byte views and their total."},
	{"fill", (PyCFunction)(void (*)(void))fill, METH_FASTCALL,
	 "Copy bytes into a list of views from its head."},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
	PyModuleDef_HEAD_INIT, "proto._scatter",
	"A payload's bytes copied into its sink's views, in C.", -1, methods, NULL, NULL, NULL,
	NULL,
};

PyMODINIT_FUNC PyInit__scatter(void)
{
	s_cast = PyUnicode_InternFromString("cast");
	s_format_B = PyUnicode_InternFromString("B");
	if (!s_cast || !s_format_B)
		return NULL;
	return PyModule_Create(&module);
}
