/* fabricd/plaintake_walk.h: the walk of fabricd/_plaintake.c (its only includer) over a
 * stretch of a work queue's slots, and the checks each WQE there must pass (see the top of
 * _plaintake.c): what take() and receives() share. What each makes of an accepted WQE is
 * theirs. */
#ifndef PLAINTAKE_WALK_H
#define PLAINTAKE_WALK_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdbool.h>
#include <string.h>

#include "df-abi.h"
#include "pyu64.h"

#define FLAG_FENCE 0x08u /* DAT_COMPLETION_BARRIER_FENCE_FLAG */

/* The attribute names key_of reads, interned once (walk_names). */
static PyObject *s_owner, *s_region, *s_pz, *s_bits, *s_address, *s_end, *s_pid, *s_view,
	*s_context, *s_walk_key;

/* Intern the names above; false with an exception set. */
static bool walk_names(void)
{
	static const char *names[] = {"owner", "region", "pz",		"privilege_bits",
				      "address", "end",	 "pid",		"view",
				      "lmr_context", "walk_key"};
	PyObject **slots[] = {&s_owner, &s_region, &s_pz,   &s_bits,	&s_address,
			      &s_end,	&s_pid,	   &s_view, &s_context, &s_walk_key};

	for (size_t i = 0; i < sizeof slots / sizeof *slots; i++) {
		*slots[i] = PyUnicode_InternFromString(names[i]);
		if (!*slots[i])
			return false;
	}
	return true;
}

/* The LMR that the last segment passed (the checks hold for every segment inside its range:
 * nothing can change its owner, PZ or privileges within one call). It holds references to
 * the LMR and its view: a finalizer that the collector runs during a call cannot free them
 * under it. */
struct key {
	PyObject *lmr; /* NULL: none passed */
	unsigned long long context, start, end;
	PyObject *view; /* lmr.view, exactly [start, end) */
	bool pid; /* a process's own memory: its bytes are not in the daemon's view */
};

static void key_clear(struct key *key)
{
	Py_CLEAR(key->lmr);
	Py_CLEAR(key->view);
}

/* A non-negative int attribute of ``o`` that fits a u64; false (no exception left) if not. */
static bool attr_u64(PyObject *o, PyObject *name, unsigned long long *out)
{
	PyObject *v = PyObject_GetAttr(o, name);
	bool ok = false;

	if (v && PyLong_Check(v)) {
		*out = PyLong_AsUnsignedLongLong(v);
		ok = !(*out == (unsigned long long)-1 && PyErr_Occurred());
	}
	Py_XDECREF(v);
	PyErr_Clear();
	return ok;
}

/* What the checks read of an LMR, none of which changes once it is registered: its owner,
 * pid and lmr_context, its region's pz, privilege bits, address and end, and its view. */
enum { K_OWNER, K_PID, K_CONTEXT, K_PZ, K_BITS, K_START, K_END, K_VIEW, K_FIELDS };

/* Those fields of ``lmr`` as a tuple (a new reference; NULL, no exception left, when one is
 * missing or not a u64), read once and kept in its ``walk_key``: the next call reads one
 * attribute, not nine (a window-1 post's LMR is looked up afresh each time). */
static PyObject *walk_key(PyObject *lmr)
{
	PyObject *t = PyObject_GetAttr(lmr, s_walk_key), *region = NULL, *view = NULL;
	unsigned long long v[K_VIEW];
	bool ok;

	if (t && PyTuple_CheckExact(t) && PyTuple_GET_SIZE(t) == K_FIELDS)
		return t;
	Py_XDECREF(t);
	PyErr_Clear();
	t = NULL;
	region = PyObject_GetAttr(lmr, s_region);
	ok = region && attr_u64(lmr, s_owner, &v[K_OWNER]) && attr_u64(lmr, s_pid, &v[K_PID]) &&
	     attr_u64(lmr, s_context, &v[K_CONTEXT]) && attr_u64(region, s_pz, &v[K_PZ]) &&
	     attr_u64(region, s_bits, &v[K_BITS]) && attr_u64(region, s_address, &v[K_START]) &&
	     attr_u64(region, s_end, &v[K_END]) && (view = PyObject_GetAttr(lmr, s_view)) &&
	     (t = PyTuple_New(K_FIELDS));
	for (int i = 0; ok && i < K_VIEW; i++) {
		PyObject *n = PyLong_FromUnsignedLongLong(v[i]);

		ok = n != NULL;
		if (ok)
			PyTuple_SET_ITEM(t, i, n);
	}
	if (ok) {
		PyTuple_SET_ITEM(t, K_VIEW, view);
		view = NULL;
		if (PyObject_SetAttr(lmr, s_walk_key, t) < 0)
			PyErr_Clear(); /* not kept: read again next time */
	} else {
		Py_CLEAR(t);
	}
	Py_XDECREF(view);
	Py_XDECREF(region);
	PyErr_Clear();
	return t;
}

/* Item ``i`` of a walk_key tuple as a u64 (pyu64.h's check); false if it is not one. */
static bool item_u64(PyObject *t, int i, unsigned long long *out)
{
	return as_u64(PyTuple_GET_ITEM(t, i), out);
}

/* The key becomes ``lmr`` when it belongs to ``owner`` and ``pz`` and grants ``need``; else
 * none (false). */
static bool key_of(PyObject *lmr, unsigned long long owner, unsigned long long pz,
		   unsigned long long need, struct key *key)
{
	unsigned long long value, bits, pid;
	PyObject *t, *view;
	bool ok;

	key_clear(key);
	t = walk_key(lmr);
	if (!t)
		return false;
	view = PyTuple_GET_ITEM(t, K_VIEW);
	ok = item_u64(t, K_OWNER, &value) && value == owner && item_u64(t, K_PID, &pid) &&
	     item_u64(t, K_CONTEXT, &key->context) && item_u64(t, K_PZ, &value) && value == pz &&
	     item_u64(t, K_BITS, &bits) && !(need & ~bits) && item_u64(t, K_START, &key->start) &&
	     item_u64(t, K_END, &key->end) && key->start <= key->end && PyMemoryView_Check(view) &&
	     PyObject_Length(view) == (Py_ssize_t)(key->end - key->start);
	PyErr_Clear();
	if (ok) {
		Py_INCREF(lmr);
		Py_INCREF(view);
		key->lmr = lmr;
		key->view = view;
		key->pid = pid != 0;
	}
	Py_DECREF(t);
	return ok;
}

/* Does [address, +length) lie inside the key's range (no u64 overflow on the way)? */
static bool inside(const struct key *key, unsigned long long address, unsigned long long length)
{
	return key->lmr && address >= key->start && address <= key->end &&
	       length <= key->end - address;
}

/* plainwqe._is_plain: one of ``opcodes`` (a bit each), one segment, no operands; staged only
 * for an unfenced Send or RDMA Write whose bytes lie inside the staging area. */
static bool is_plain(const struct df_wqe *w, const struct df_wqe_segment *s,
		     unsigned long long opcodes, Py_ssize_t stage_bytes)
{
	if (w->opcode >= 64 || !(opcodes >> w->opcode & 1) || w->num_segments != 1 || w->operand ||
	    w->compare)
		return false;
	if (!w->wqe_flags)
		return !w->stage_offset;
	if (w->wqe_flags != DF_WQE_STAGED || w->completion_flags & FLAG_FENCE ||
	    (w->opcode != DF_OP_SEND && w->opcode != DF_OP_RDMA_WRITE))
		return false;
	return s->segment_length <= (unsigned long long)stage_bytes &&
	       w->stage_offset <= (unsigned long long)stage_bytes - s->segment_length;
}

/* What take() and receives() are given first: a stretch of a work queue's slots and the rules
 * each WQE there must pass. */
struct stretch {
	Py_buffer ring;
	unsigned long long at, count, entry_size, opcodes, owner, pz, need;
	PyObject *lmrs, *before; /* borrowed */
};

/* Parse (ring, at, count, entry_size, opcodes, lmrs, owner, pz, need, before); the ring's
 * buffer is held (the caller releases it) unless it returns false, with an exception set. */
static bool stretch_open(struct stretch *st, PyObject *const *args)
{
	st->at = PyLong_AsUnsignedLongLong(args[1]);
	st->count = PyLong_AsUnsignedLongLong(args[2]);
	st->entry_size = PyLong_AsUnsignedLongLong(args[3]);
	st->opcodes = PyLong_AsUnsignedLongLong(args[4]);
	st->owner = PyLong_AsUnsignedLongLong(args[6]);
	st->pz = PyLong_AsUnsignedLongLong(args[7]);
	st->need = PyLong_AsUnsignedLongLong(args[8]);
	if (PyErr_Occurred())
		return false;
	st->lmrs = args[5];
	st->before = args[9];
	if (!PyDict_Check(st->lmrs)) {
		PyErr_SetString(PyExc_TypeError, "lmrs must be a dict");
		return false;
	}
	if (st->entry_size < sizeof(struct df_wqe) + sizeof(struct df_wqe_segment)) {
		PyErr_SetString(PyExc_ValueError, "a slot too small for a WQE");
		return false;
	}
	if (PyObject_GetBuffer(args[0], &st->ring, PyBUF_SIMPLE) < 0)
		return false;
	if (st->at > (unsigned long long)st->ring.len ||
	    st->count > ((unsigned long long)st->ring.len - st->at) / st->entry_size) {
		PyErr_SetString(PyExc_ValueError, "the slots lie outside the ring");
		PyBuffer_Release(&st->ring);
		return false;
	}
	return true;
}

/* One accepted WQE handed on (to a run, or made a receive); false on a Python error. */
typedef bool (*accept_fn)(void *to, const struct df_wqe *w, const struct df_wqe_segment *s,
			  const struct key *key, PyObject *stage);

/* The walk both calls make: each slot copied once, then checked (_plaintake.c says how); stops
 * before the first WQE that is not plain or whose segment fails, and, ``fetchable`` (receives),
 * where the key changes: one key per call. False on a Python error. */
static bool walk(struct stretch *st, PyObject *stage, Py_ssize_t stage_bytes, bool fetchable,
		 struct key *key, accept_fn accept, void *to)
{
	if (st->before != Py_None)
		key_of(st->before, st->owner, st->pz, st->need, key);
	for (unsigned long long i = 0; i < st->count; i++) {
		const unsigned char *slot =
			(const unsigned char *)st->ring.buf + st->at + i * st->entry_size;
		struct df_wqe w;
		struct df_wqe_segment s;

		memcpy(&w, slot, sizeof w); /* once: the driver may be writing the slot */
		memcpy(&s, slot + sizeof w, sizeof s);
		if (!is_plain(&w, &s, st->opcodes, stage_bytes) || !s.segment_length)
			break;
		if (!(key->lmr && s.lmr_context == key->context &&
		      inside(key, s.virtual_address, s.segment_length))) {
			PyObject *ctx, *lmr;

			if (fetchable && i)
				break; /* one key per call */
			ctx = PyLong_FromUnsignedLongLong(s.lmr_context);
			if (!ctx)
				return false;
			lmr = PyDict_GetItemWithError(st->lmrs, ctx); /* borrowed */
			Py_DECREF(ctx);
			if (!lmr && PyErr_Occurred())
				return false;
			if (!lmr || !key_of(lmr, st->owner, st->pz, st->need, key))
				break;
			if (key->context != s.lmr_context ||
			    !inside(key, s.virtual_address, s.segment_length))
				break;
		}
		if (key->pid && !w.wqe_flags && !fetchable)
			break; /* a request's bytes in a process: the general path fetches them */
		if (!accept(to, &w, &s, key, stage))
			return false;
	}
	return true;
}

/* The stretch ``args`` name (stretch_open) walked (walk), its buffer and key let go after: the
 * LMR whose checks passed last, which the next call may pass as ``before`` (a new reference;
 * None when none did), or NULL with an exception set. */
static PyObject *walk_args(PyObject *const *args, PyObject *stage, Py_ssize_t stage_bytes,
			   bool fetchable, accept_fn accept, void *to)
{
	struct stretch st;
	struct key key = {0};
	PyObject *lmr = NULL;

	if (!stretch_open(&st, args))
		return NULL;
	if (walk(&st, stage, stage_bytes, fetchable, &key, accept, to)) {
		lmr = key.lmr ? key.lmr : Py_None;
		Py_INCREF(lmr);
	}
	key_clear(&key);
	PyBuffer_Release(&st.ring);
	return lmr;
}

#endif
