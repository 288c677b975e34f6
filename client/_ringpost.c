/* client._ringpost: the Python client's common post, checked and written into its work queue
 * in C (docs/host-interface.md sections 3-5).
 *
 * client/posting.py holds the rules; this is its fast path for a Send, Receive, RDMA Write or
 * RDMA Read of one non-empty segment, every argument an exact int or list/tuple. Anything else,
 * and anything that would fail a check, is declined (None) with nothing written, and the
 * general path in Python then names the error. The layout is provider/df-abi.h's, shared with
 * the C provider and the daemon. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#include "df-abi.h"

/* The EP's snapshot, EpMirror.fast (Posting.snapshot builds it; every item an int but the
 * first four). */
enum fast_item {
	FAST_SQ_VIEW,
	FAST_RQ_VIEW,
	FAST_SQ, /* the Ring objects: their ``mine`` is the producer index this side trusts */
	FAST_RQ,
	FAST_PZ,
	FAST_SRQ,
	FAST_MAX_REQUESTS,
	FAST_MAX_RECVS,
	FAST_MAX_MESSAGE,
	FAST_MAX_RDMA,
	FAST_UNSIGNALLED, /* request_completion_flags allow UNSIGNALLED */
	FAST_IOV_OK, /* bit ``opcode``: that opcode's max_*_iov is at least 1 */
	FAST_POSTABLE, /* bit ``state``: requests may be posted in that EP state */
	FAST_ITEMS,
};

#define U32_MAX_VALUE 0xFFFFFFFFull
#define FLAGS_KNOWN 0x3Full
#define FLAG_SUPPRESS 0x01ull /* DAT_COMPLETION_SUPPRESS_FLAG */
#define FLAG_UNSIGNALLED 0x04ull /* DAT_COMPLETION_UNSIGNALLED_FLAG */
#define RING_BYTES (sizeof(struct df_ring_hdr) + (size_t)DF_WQ_ENTRIES * DF_WQ_ENTRY_SIZE)

static PyObject *s_fast, *s_mine, *s_binds, *s_rung, *s_address, *s_end, *s_pz, *s_bits;

/* An exact int (no bool, no enum) as a u64; false, with no exception left, otherwise. Signed
 * first: for the addresses a post carries (47 bits) that is a loop over the digits, where the
 * unsigned conversion goes through a byte array (~15 % of a post). */
static bool as_u64(PyObject *o, unsigned long long *out)
{
	long long value;
	int overflow;

	if (!PyLong_CheckExact(o))
		return false;
	value = PyLong_AsLongLongAndOverflow(o, &overflow);
	if (!overflow) {
		if (value < 0) {
			PyErr_Clear(); /* -1 may also be an error: either way, not a u64 */
			return false;
		}
		*out = (unsigned long long)value;
		return true;
	}
	*out = PyLong_AsUnsignedLongLong(o); /* 2^63 and above, or below the signed range */
	if (*out == (unsigned long long)-1 && PyErr_Occurred()) {
		PyErr_Clear();
		return false;
	}
	return true;
}

/* An int attribute of ``o`` as a u64 (a Ring's index, an EpMirror's counts, a Region's
 * fields): false, with no exception left, when it is missing or not one. */
static bool attr_u64(PyObject *o, PyObject *name, unsigned long long *out)
{
	PyObject *v = PyObject_GetAttr(o, name);
	bool ok;

	if (!v) {
		PyErr_Clear();
		return false;
	}
	ok = as_u64(v, out);
	Py_DECREF(v);
	return ok;
}

/* A list or tuple of exactly ``n`` items, its items in ``out`` (borrowed). */
static bool items(PyObject *o, Py_ssize_t n, PyObject ***out)
{
	if ((!PyList_CheckExact(o) && !PyTuple_CheckExact(o)) || PySequence_Fast_GET_SIZE(o) != n)
		return false;
	*out = PySequence_Fast_ITEMS(o);
	return true;
}

struct post {
	unsigned long long opcode, need, cookie, flags;
	unsigned long long address, length, context; /* the local segment */
	unsigned long long r_address, r_length, r_context; /* the remote buffer (RDMA only) */
};

/* The local segment against its LMR: registered, same PZ, the privilege, within bounds. */
static bool region_ok(PyObject *regions, PyObject *context, unsigned long long pz,
		      const struct post *p)
{
	PyObject *region = PyDict_GetItemWithError(regions, context);
	unsigned long long address, end, region_pz, bits;

	if (!region) {
		PyErr_Clear();
		return false;
	}
	if (!attr_u64(region, s_address, &address) || !attr_u64(region, s_end, &end) ||
	    !attr_u64(region, s_pz, &region_pz) || !attr_u64(region, s_bits, &bits))
		return false;
	return region_pz == pz && !(p->need & ~bits) && p->length <= end &&
	       address <= p->address && p->address <= end - p->length;
}

/* A work queue's ring in its view, the buffer held (released by the caller) once the view is
 * known to hold the whole ring; NULL, nothing held, otherwise. */
static struct df_ring_hdr *ring_of(PyObject *view, Py_buffer *b)
{
	if (PyObject_GetBuffer(view, b, PyBUF_WRITABLE) < 0) {
		PyErr_Clear();
		return NULL;
	}
	if ((size_t)b->len < RING_BYTES) {
		PyBuffer_Release(b);
		return NULL;
	}
	return b->buf;
}

/* A word of the ring's consumer line (the daemon's). */
static uint32_t word_of(struct df_ring_hdr *hdr, enum df_wq_word word)
{
	return atomic_load_explicit(&hdr->cons_words[word], memory_order_acquire);
}

/* The WQE into the slot of ``mine`` (``ring.mine``), then the producer index stored with
 * release (section 3: the slot's bytes are visible before the index that publishes them), and
 * ``ring.mine``. */
static bool produce(struct df_ring_hdr *hdr, PyObject *ring, unsigned long long mine,
		    const struct post *p)
{
	struct {
		struct df_wqe wqe;
		struct df_wqe_segment segment;
	} e;
	size_t at = (size_t)(mine & (DF_WQ_ENTRIES - 1)) * DF_WQ_ENTRY_SIZE;
	PyObject *next;
	int failed;

	memset(&e, 0, sizeof(e));
	e.wqe.opcode = (uint8_t)p->opcode;
	e.wqe.num_segments = 1;
	e.wqe.completion_flags = (uint32_t)p->flags;
	e.wqe.user_cookie = p->cookie;
	e.wqe.remote_address = p->r_address;
	e.wqe.remote_length = p->r_length;
	e.wqe.rmr_context = (uint32_t)p->r_context;
	e.segment.virtual_address = p->address;
	e.segment.segment_length = p->length;
	e.segment.lmr_context = (uint32_t)p->context;
	memcpy((uint8_t *)(hdr + 1) + at, &e, sizeof(e)); /* the slots follow the header */
	mine = (mine + 1) & U32_MAX_VALUE;
	atomic_store_explicit(&hdr->prod, (uint32_t)mine, memory_order_release);
	next = PyLong_FromUnsignedLongLong(mine);
	failed = next ? PyObject_SetAttr(ring, s_mine, next) : -1;
	Py_XDECREF(next);
	/* Only out of memory: the WQE is out, the mirror's index not; the caller raises. */
	return !failed;
}

/* Posted: a doorbell only when the daemon does not poll the EP and has taken every doorbell
 * so far (the SQ's consumer line carries both words for the two queues). Our index was
 * stored, then POLL and HEARD are loaded: a full barrier between (section 5). */
static PyObject *doorbell(PyObject *ep, struct df_ring_hdr *sq)
{
	unsigned long long rung;

	atomic_thread_fence(memory_order_seq_cst);
	if (word_of(sq, DF_WQ_POLL) || !attr_u64(ep, s_rung, &rung))
		Py_RETURN_FALSE;
	return PyBool_FromLong((rung & U32_MAX_VALUE) == word_of(sq, DF_WQ_HEARD));
}

/* post(eps, regions, opcode, need_bits, handle, local_iov, cookie, remote, flags):
 * None: declined, nothing written; False: posted, the daemon will look without a doorbell;
 * True: posted, and the caller sends a doorbell (it counts it in EpMirror.rung). */
static PyObject *post(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
	PyObject *eps, *regions, *ep, *fast, **f, **iov, **segment, **remote, *ring, *result;
	unsigned long long pz, srq, max_req, max_recv, max_msg, max_rdma, unsig, iov_ok, postable;
	unsigned long long mine, binds, outstanding;
	uint32_t state;
	Py_buffer sq_buf, rq_buf;
	struct df_ring_hdr *sq = NULL, *rq = NULL;
	struct post p = {0};
	bool ok;

	(void)module;
	if (nargs != 9) {
		PyErr_SetString(PyExc_TypeError, "post takes 9 arguments");
		return NULL;
	}
	eps = args[0];
	regions = args[1];
	if (!PyDict_CheckExact(eps) || !PyDict_CheckExact(regions)) {
		PyErr_SetString(PyExc_TypeError, "post: eps and regions are dicts");
		return NULL;
	}
	if (!as_u64(args[2], &p.opcode) || !as_u64(args[3], &p.need) ||
	    !PyLong_CheckExact(args[4]) || !as_u64(args[6], &p.cookie))
		Py_RETURN_NONE;
	/* flags: an int or an IntFlag (CompletionFlags), as the general path takes them */
	if (!PyLong_Check(args[8]) || PyBool_Check(args[8]))
		Py_RETURN_NONE;
	p.flags = PyLong_AsUnsignedLongLong(args[8]);
	if (PyErr_Occurred()) {
		PyErr_Clear();
		Py_RETURN_NONE;
	}
	if (p.opcode < DF_OP_SEND || p.opcode > DF_OP_RECEIVE || p.flags & ~FLAGS_KNOWN)
		Py_RETURN_NONE;
	ep = PyDict_GetItemWithError(eps, args[4]);
	if (!ep) {
		PyErr_Clear();
		Py_RETURN_NONE;
	}
	fast = PyObject_GetAttr(ep, s_fast);
	if (!fast) {
		PyErr_Clear();
		Py_RETURN_NONE;
	}
	/* From here the EP and its snapshot are held: every exit goes through ``out``. */
	Py_INCREF(ep);
	ok = PyTuple_CheckExact(fast) && PyTuple_GET_SIZE(fast) == FAST_ITEMS;
	f = ok ? &PyTuple_GET_ITEM(fast, 0) : NULL;
	ok = ok && as_u64(f[FAST_PZ], &pz) && as_u64(f[FAST_SRQ], &srq) &&
	     as_u64(f[FAST_MAX_REQUESTS], &max_req) && as_u64(f[FAST_MAX_RECVS], &max_recv) &&
	     as_u64(f[FAST_MAX_MESSAGE], &max_msg) && as_u64(f[FAST_MAX_RDMA], &max_rdma) &&
	     as_u64(f[FAST_UNSIGNALLED], &unsig) && as_u64(f[FAST_IOV_OK], &iov_ok) &&
	     as_u64(f[FAST_POSTABLE], &postable);
	ok = ok && items(args[5], 1, &iov) && items(iov[0], 3, &segment) &&
	     as_u64(segment[0], &p.address) && as_u64(segment[1], &p.length) &&
	     as_u64(segment[2], &p.context) && p.context <= U32_MAX_VALUE && p.length > 0 &&
	     p.length <= U32_MAX_VALUE && (iov_ok >> p.opcode & 1) &&
	     region_ok(regions, segment[2], pz, &p);
	if (!ok)
		goto out;
	/* The SQ's consumer line is read for every post (the doorbell's words), the RQ's for a
	 * receive; each buffer is held until ``out``. */
	sq = ring_of(f[FAST_SQ_VIEW], &sq_buf);
	if (p.opcode == DF_OP_RECEIVE) {
		ring = f[FAST_RQ];
		rq = sq ? ring_of(f[FAST_RQ_VIEW], &rq_buf) : NULL;
		ok = rq && !srq && !(p.flags & FLAG_SUPPRESS) && attr_u64(ring, s_mine, &mine) &&
		     mine <= U32_MAX_VALUE;
		/* Outstanding receives: WQEs not completed. */
		ok = ok && ((mine - word_of(rq, DF_WQ_DONE)) & U32_MAX_VALUE) < max_recv &&
		     produce(rq, ring, mine, &p);
		goto out;
	}
	ring = f[FAST_SQ];
	ok = sq && attr_u64(ring, s_mine, &mine) && mine <= U32_MAX_VALUE &&
	     attr_u64(ep, s_binds, &binds);
	if (!ok)
		goto out;
	state = word_of(sq, DF_WQ_STATE);
	/* Outstanding requests: WQEs not completed, and RMR binds not yet answered. */
	outstanding = (mine - word_of(sq, DF_WQ_DONE)) & U32_MAX_VALUE;
	binds = (binds - word_of(sq, DF_WQ_BOUND)) & U32_MAX_VALUE;
	if (binds < (U32_MAX_VALUE + 1) / 2)
		outstanding += binds;
	ok = state < 64 && (postable >> state & 1) && (!(p.flags & FLAG_UNSIGNALLED) || unsig) &&
	     outstanding < max_req;
	if (ok && p.opcode == DF_OP_SEND) {
		ok = p.length <= max_msg;
	} else if (ok) {
		ok = items(args[7], 3, &remote) && as_u64(remote[0], &p.r_address) &&
		     as_u64(remote[1], &p.r_length) && as_u64(remote[2], &p.r_context) &&
		     p.r_context <= U32_MAX_VALUE && p.r_length <= U32_MAX_VALUE &&
		     p.length <= max_rdma && p.r_length <= max_rdma &&
		     /* a Read's remote bytes fit the local ones; a Write's local fit the remote */
		     (p.opcode == DF_OP_RDMA_READ ? p.r_length <= p.length
						  : p.length <= p.r_length);
	}
	ok = ok && produce(sq, ring, mine, &p);
out:
	result = PyErr_Occurred() ? NULL : ok ? doorbell(ep, sq) : Py_NewRef(Py_None);
	if (rq)
		PyBuffer_Release(&rq_buf);
	if (sq)
		PyBuffer_Release(&sq_buf);
	Py_DECREF(fast);
	Py_DECREF(ep);
	return result;
}

static PyMethodDef methods[] = {
	{"post", (PyCFunction)(void (*)(void))post, METH_FASTCALL,
	 "post(eps, regions, opcode, need_bits, handle, local_iov, cookie, remote, flags): the "
	 "common post into the EP's work queue; None (declined), False or True (ring the "
	 "doorbell)."},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
	PyModuleDef_HEAD_INIT, "client._ringpost", "The Python client's common post, in C.", -1,
	methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__ringpost(void)
{
	struct {
		PyObject **slot;
		const char *name;
	} names[] = {
		{&s_fast, "fast"},
		{&s_mine, "mine"},
		{&s_binds, "binds"},
		{&s_rung, "rung"},
		{&s_address, "address"},
		{&s_end, "end"},
		{&s_pz, "pz"},
		{&s_bits, "privilege_bits"},
	};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		*names[i].slot = PyUnicode_InternFromString(names[i].name);
		if (!*names[i].slot)
			return NULL;
	}
	return PyModule_Create(&module_def);
}
