/* fabricd._lanes: the lanes of a peer's read in C (fabricd/nic/lane.py holds their rules and
 * calls them). lane() lands the lone WRITE frames at the head of a read, in order, each under a
 * key the caller granted, and stops before the first frame it cannot finish whole; acks() reads
 * the lone ACKs at the head of a read for the initiator the same way, and read_resp() lands
 * the answer of its one outstanding RDMA Read; serve() answers a lone RDMA Read request for
 * the target (its READ_RESP packed by msgpack-c: proto/pack_u64.h), request() finds one for
 * the long way's checks. Each header is decoded by msgpack-c (fabricd/lanes_head.h), and
 * anything but the one shape a lane takes is left to the long way (proto.codec.decode_header).
 * So this module can only decline work; it never decides an error. put_process() is the
 * daemon's way into a C program's own memory for the lane (cross-memory attach,
 * fabricd/cma.py's CrossMemory.put). */
#define _GNU_SOURCE
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "../proto/pack_u64.h"
#include "lanes_head.h"
#include "lanes_grant.h"

/* A process's memory under the grant (its ``pid`` not 0: the target is the daemon's mirror
 * of it) gets the bytes just landed in the mirror, [offset, +size) of ``view`` to ``address``:
 * put(pid, address, view, offset, size) must answer True. False (no exception left) when it
 * does not, or when there is no ``put``: the long way then lands the Write again and decides. */
static bool reached(PyObject *grant, PyObject *put, unsigned long long address, PyObject *view,
		    unsigned long long offset, unsigned long long size)
{
	PyObject *pid = PyTuple_GET_ITEM(grant, G_PID), *argv[5] = {NULL}, *r = NULL;
	unsigned long long n;
	bool ok = false;

	if (!as_u64(pid, &n))
		goto done;
	if (!n) {
		ok = true; /* a segment: the landing was all */
		goto done;
	}
	argv[0] = pid;
	argv[1] = PyLong_FromUnsignedLongLong(address);
	argv[2] = view;
	argv[3] = PyLong_FromUnsignedLongLong(offset);
	argv[4] = PyLong_FromUnsignedLongLong(size);
	if (argv[1] && argv[3] && argv[4] && put != Py_None) {
		r = PyObject_Vectorcall(put, argv, 5, NULL);
		ok = r == Py_True;
	}
	Py_XDECREF(argv[1]);
	Py_XDECREF(argv[3]);
	Py_XDECREF(argv[4]);
done:
	Py_XDECREF(r);
	PyErr_Clear();
	return ok;
}

/* The lone Write whose header is ``fields`` ([type, size, seq, address, rmr_context]) and
 * whose payload is the ``available`` bytes at ``payload``, landed if it is the common one:
 * a WRITE, ``seq`` == ``acked`` + 1, a payload that is all there, a key ``granted``, and in a
 * process's memory the bytes put there (``reached``). Its payload size, 0 when it is not (no
 * exception left; a process's mirror may hold the bytes, which the long way lands again);
 * ``before`` is called once, before the first landing (-1 when it raised). */
static long long land_one(const unsigned long long *fields, const char *payload,
			  Py_ssize_t available, PyObject *grants, long long acked,
			  unsigned long long write_type, PyObject *before, PyObject *put, bool *ready)
{
	unsigned long long offset;
	PyObject *grant;
	long long size = 0;
	Py_buffer *target;

	if (fields[0] != write_type || !fields[1] || fields[1] > (unsigned long long)available ||
	    acked < 0 || fields[2] != (unsigned long long)acked + 1)
		return 0;
	/* held, with its target, across before() and put() */
	grant = granted(grants, fields[4], fields[3], fields[1], &target, &offset);
	if (!grant)
		goto done;
	if (!*ready) {
		PyObject *r = PyObject_CallNoArgs(before);

		if (!r) {
			size = -1;
			goto done;
		}
		Py_DECREF(r);
		*ready = true;
	}
	memcpy((char *)target->buf + offset, payload, (size_t)fields[1]);
	if (reached(grant, put, fields[3], PyTuple_GET_ITEM(grant, G_TARGET), offset, fields[1]))
		size = (long long)fields[1];
done:
	if (size >= 0)
		PyErr_Clear();
	Py_XDECREF(grant);
	return size;
}

/* lane(buffer, start, end, grants, acked, before, write_type, max_header, put) -> (stop, acked)
 *
 * The lone Writes at buffer[start:end]'s head, each a 4-byte big-endian header length, its
 * msgpack header and its payload, landed in order (``land_one``) until the first frame that
 * is not one; where it stopped (a frame boundary) and the last sequence number landed. ``put``
 * reaches a process's memory (``reached``), or is None. */
static PyObject *lane(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
	unsigned long long write_type, max_header, fields[5];
	Py_ssize_t start, end, head;
	long long acked;
	bool ready = false;
	Py_buffer *buf;

	(void)self;
	if (nargs != 9) {
		PyErr_SetString(PyExc_TypeError, "lane() takes 9 arguments");
		return NULL;
	}
	if (!lane_range(args, &buf, &start, &end))
		return NULL;
	acked = PyLong_AsLongLong(args[4]);
	if (PyErr_Occurred())
		return NULL;
	if (!PyDict_Check(args[3]) || !as_u64(args[6], &write_type) || !as_u64(args[7], &max_header)) {
		PyErr_SetString(PyExc_TypeError, "lane(): grants is a dict, the types ints");
		return NULL;
	}
	while (header_at(buf, start, end, max_header, fields, 5, &head)) {
		long long size = land_one(fields, (const char *)buf->buf + head, end - head, args[3],
					  acked, write_type, args[5], args[8], &ready);

		if (size < 0)
			return NULL;
		if (!size)
			break;
		acked++;
		start = head + (Py_ssize_t)size;
	}
	return Py_BuildValue("(nL)", start, acked);
}

/* acks(buffer, start, end, acked, limit, ack_type, max_header) -> (stop, acked)
 *
 * The initiator's lane: the lone ACKs at buffer[start:end]'s head ([type, 0, seq], each
 * ``seq`` below ``limit``, the EP's next sequence number), taken until the first frame that is
 * not one; where it stopped and the highest ``seq`` seen (``acked`` when none is higher). */
static PyObject *acks(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
	unsigned long long acked, limit, ack_type, max_header, fields[3];
	Py_ssize_t start, end, head;
	Py_buffer *buf;

	(void)self;
	if (nargs != 7) {
		PyErr_SetString(PyExc_TypeError, "acks() takes 7 arguments");
		return NULL;
	}
	if (!lane_range(args, &buf, &start, &end))
		return NULL;
	if (!as_u64(args[3], &acked) || !as_u64(args[4], &limit) || !as_u64(args[5], &ack_type) ||
	    !as_u64(args[6], &max_header)) {
		PyErr_SetString(PyExc_TypeError, "acks(): the sequence numbers and types are u64s");
		return NULL;
	}
	while (header_at(buf, start, end, max_header, fields, 3, &head)) {
		/* fields: type, payload size, seq */
		if (fields[0] != ack_type || fields[1] || fields[2] >= limit)
			break;
		if (fields[2] > acked)
			acked = fields[2];
		start = head;
	}
	return Py_BuildValue("(nK)", start, acked);
}

/* request(buffer, start, end, frame_type, count, max_header) -> (stop, header)
 *
 * The frame at buffer[start:end]'s head when it is whole, carries no payload, is of
 * ``frame_type`` and its header is ``count`` u64s: where it ends and its header (a list of
 * those ints, as the codec's msgpack decodes it); else (start, None). The target's lane for a lone RDMA
 * Read request that serve() declined (Responder.serve). */
static PyObject *request(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
	unsigned long long frame_type, count, max_header, fields[8];
	Py_ssize_t start, end, head;
	Py_buffer *buf;
	PyObject *header, *out;

	(void)self;
	if (nargs != 6) {
		PyErr_SetString(PyExc_TypeError, "request() takes 6 arguments");
		return NULL;
	}
	if (!lane_range(args, &buf, &start, &end))
		return NULL;
	if (!as_u64(args[3], &frame_type) || !as_u64(args[4], &count) || count < 2 ||
	    count > sizeof fields / sizeof *fields || !as_u64(args[5], &max_header)) {
		PyErr_SetString(PyExc_TypeError, "request(): the type, 2..8 fields, a header limit");
		return NULL;
	}
	/* fields: type, payload size, then the frame's own */
	if (!header_at(buf, start, end, max_header, fields, (size_t)count, &head) ||
	    fields[0] != frame_type || fields[1])
		return Py_BuildValue("(nO)", start, Py_None);
	header = PyList_New((Py_ssize_t)count);
	for (Py_ssize_t i = 0; header && i < (Py_ssize_t)count; i++) {
		PyObject *item = PyLong_FromUnsignedLongLong(fields[i]);

		if (!item) {
			Py_CLEAR(header);
			break;
		}
		PyList_SET_ITEM(header, i, item);
	}
	if (!header)
		return NULL;
	out = Py_BuildValue("(nO)", head, header);
	Py_DECREF(header);
	return out;
}

/* serve(buffer, start, end, seq, reads_in, max_in, max_size, grants, req_type, resp_type,
 *       max_header) -> (stop, frame)
 *
 * The target's lane for a lone RDMA Read request: when the frame at buffer[start:end] is all
 * of it, a READ_REQ ([req_type, 0, seq, address, rmr_context, length, reads_done]) of request
 * ``seq`` within the read credits (``reads_in`` before it, at most ``max_in`` unanswered by
 * the initiator's count ``reads_done``: Responder._credited) of 1 to ``max_size`` bytes under
 * a key ``granted`` to a segment (its pid 0), its READ_RESP: the whole frame, [resp_type,
 * length, seq] and a copy of the bytes, with ``end``. Else (start, None): the long way reads
 * it again, and decides. */
static PyObject *serve(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
	unsigned long long seq, reads_in, max_in, max_size, req_type, resp_type, max_header;
	unsigned long long fields[7], offset, pid, head_items[3];
	Py_ssize_t start, end, head;
	PyObject *grant, *frame;
	Py_buffer *buf, *target;
	struct packed p;

	(void)self;
	if (nargs != 11) {
		PyErr_SetString(PyExc_TypeError, "serve() takes 11 arguments");
		return NULL;
	}
	if (!lane_range(args, &buf, &start, &end))
		return NULL;
	if (!as_u64(args[3], &seq) || !as_u64(args[4], &reads_in) || !as_u64(args[5], &max_in) ||
	    !as_u64(args[6], &max_size) || !PyDict_Check(args[7]) || !as_u64(args[8], &req_type) ||
	    !as_u64(args[9], &resp_type) || !as_u64(args[10], &max_header)) {
		PyErr_SetString(PyExc_TypeError, "serve(): the numbers are u64s, the grants a dict");
		return NULL;
	}
	/* fields: type, payload size, seq, address, rmr_context, length, reads_done */
	if (!header_at(buf, start, end, max_header, fields, 7, &head) || head != end ||
	    fields[0] != req_type || fields[1] || fields[2] != seq || !fields[5] ||
	    fields[5] > max_size || reads_in == ULLONG_MAX ||
	    (fields[6] <= reads_in && reads_in + 1 - fields[6] > max_in))
		return Py_BuildValue("(nO)", start, Py_None);
	grant = granted(args[7], fields[4], fields[3], fields[5], &target, &offset);
	if (!grant) {
		if (PyErr_Occurred())
			return NULL;
		return Py_BuildValue("(nO)", start, Py_None);
	}
	head_items[0] = resp_type;
	head_items[1] = fields[5];
	head_items[2] = seq;
	if (!as_u64(PyTuple_GET_ITEM(grant, G_PID), &pid) || pid || !pack_u64s(&p, head_items, 3)) {
		Py_DECREF(grant);
		return Py_BuildValue("(nO)", start, Py_None);
	}
	frame = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(p.len + fields[5]));
	if (frame) {
		memcpy(PyBytes_AS_STRING(frame), p.bytes, p.len);
		memcpy(PyBytes_AS_STRING(frame) + p.len, (const char *)target->buf + offset,
		       (size_t)fields[5]);
	}
	Py_DECREF(grant);
	if (!frame)
		return NULL;
	return Py_BuildValue("(nN)", end, frame);
}

/* read_resp(buffer, start, end, seq, sink, resp_type, max_header) -> (stop, length)
 *
 * The initiator's lane for the answer of its one outstanding RDMA Read: when the frame at
 * buffer[start:end]'s head is a whole READ_RESP ([type, size, seq]) of request ``seq`` whose
 * payload fits ``sink`` (a writable memoryview: the Read's local buffer), the payload copied
 * there; where it stopped (after that frame, or ``start`` when it took nothing) and the
 * payload's size. */
static PyObject *read_resp(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
	unsigned long long seq, resp_type, max_header, fields[3];
	Py_ssize_t start, end, head;
	Py_buffer *buf, *sink;

	(void)self;
	if (nargs != 7) {
		PyErr_SetString(PyExc_TypeError, "read_resp() takes 7 arguments");
		return NULL;
	}
	if (!lane_range(args, &buf, &start, &end))
		return NULL;
	sink = byte_buffer(args[4], true);
	if (!as_u64(args[3], &seq) || !sink || !as_u64(args[5], &resp_type) ||
	    !as_u64(args[6], &max_header)) {
		PyErr_SetString(PyExc_TypeError,
				"read_resp(): seq and the types are u64s, the sink a writable view");
		return NULL;
	}
	/* fields: type, payload size, seq; the payload all in this read and inside the sink */
	if (!header_at(buf, start, end, max_header, fields, 3, &head) || fields[0] != resp_type || fields[2] != seq ||
	    fields[1] > (unsigned long long)(end - head) || fields[1] > (unsigned long long)sink->len)
		return Py_BuildValue("(nK)", start, 0ULL);
	memcpy(sink->buf, (const char *)buf->buf + head, (size_t)fields[1]);
	return Py_BuildValue("(nK)", head + (Py_ssize_t)fields[1], fields[1]);
}

/* put_process(pid, address, source, offset, length) -> bool
 *
 * source[offset:+length] (a byte buffer, checked to hold it) to ``address`` in process
 * ``pid`` by process_vm_writev, a short transfer continued where it stopped; False when the
 * range is not mapped there or the process is gone (the bytes before may have moved). */
static PyObject *put_process(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
	unsigned long long pid, address, offset, length, done = 0;
	Py_buffer *source;

	(void)self;
	if (nargs != 5) {
		PyErr_SetString(PyExc_TypeError, "put_process() takes 5 arguments");
		return NULL;
	}
	source = byte_buffer(args[2], false);
	if (!as_u64(args[0], &pid) || !as_u64(args[1], &address) || !as_u64(args[3], &offset) ||
	    !as_u64(args[4], &length) || !source || !pid || pid > INT32_MAX ||
	    offset > (unsigned long long)source->len ||
	    length > (unsigned long long)source->len - offset) {
		PyErr_SetString(PyExc_TypeError, "put_process(): a pid, u64s and a range of a buffer");
		return NULL;
	}
	while (done < length) {
		struct iovec local = {(char *)source->buf + offset + done, length - done};
		struct iovec remote = {(void *)(uintptr_t)(address + done), length - done};
		ssize_t n = process_vm_writev((pid_t)pid, &local, 1, &remote, 1, 0);

		if (n <= 0)
			Py_RETURN_FALSE;
		done += (unsigned long long)n;
	}
	Py_RETURN_TRUE;
}

static PyMethodDef methods[] = {
	{"lane", (PyCFunction)(void (*)(void))lane, METH_FASTCALL,
	 "The lone RDMA Writes at the head of a read, landed under granted keys."},
	{"acks", (PyCFunction)(void (*)(void))acks, METH_FASTCALL,
	 "The lone ACKs at the head of a read: where they end, the highest."},
	{"request", (PyCFunction)(void (*)(void))request, METH_FASTCALL,
	 "The whole frame of one type and no payload at the head of a read: its header."},
	{"serve", (PyCFunction)(void (*)(void))serve, METH_FASTCALL,
	 "A lone RDMA Read request at the head of a read, answered: its READ_RESP frame."},
	{"read_resp", (PyCFunction)(void (*)(void))read_resp, METH_FASTCALL,
	 "The answer of the one outstanding RDMA Read at the head of a read, landed."},
	{"put_process", (PyCFunction)(void (*)(void))put_process, METH_FASTCALL,
	 "Bytes of a buffer into another process's memory (process_vm_writev)."},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
	PyModuleDef_HEAD_INIT, "fabricd._lanes",
	"The lanes of a peer's read, in C.", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__lanes(void)
{
	return PyModule_Create(&module);
}
