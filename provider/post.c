/* The posts: dat_ep_post_send, dat_ep_post_recv, dat_ep_post_rdma_write and
 * dat_ep_post_rdma_read, and the IB extensions' fetch-and-add, compare-and-swap and RDMA Write
 * with immediate data (ext.c reads their arguments; docs/host-interface.md sections 4 and 5).
 *
 * Every synchronous check the manual pages require is made here, under the IA's lock, before
 * the WQE is written; a WQE in the ring is a post that was accepted. A doorbell is rung only
 * when the daemon would not look anyway. */
#include <string.h>

#include "df.h"

/* What depends on the kind of post. The argument numbers are the call's own (an IB
 * extension's call counts its EP as 1 and the operation as 2). */
struct post_rule {
	enum df_opcode opcode;
	DAT_MEM_PRIV_FLAGS need; /* the local privilege the local segments must grant */
	DAT_RETURN count_arg, iov_arg, remote_arg, flags_arg; /* the argument numbers */
	bool receive, send, into_local;
	bool atomic; /* one local segment of 8 bytes, 8 aligned remote bytes, an operand */
};

#define READ DAT_MEM_PRIV_LOCAL_READ_FLAG
#define WRITE DAT_MEM_PRIV_LOCAL_WRITE_FLAG
#define ARG(n) DAT_INVALID_ARG##n
static const struct post_rule rules[] = {
	/* {opcode, need, count, iov, remote and flags arguments, receive, send, into_local, atomic} */
	[DF_OP_SEND] = {DF_OP_SEND, READ, ARG(2), ARG(3), 0, ARG(5), false, true, false, false},
	[DF_OP_RDMA_WRITE] =
		{DF_OP_RDMA_WRITE, READ, ARG(2), ARG(3), ARG(5), ARG(6), false, false, false, false},
	[DF_OP_RDMA_READ] =
		{DF_OP_RDMA_READ, WRITE, ARG(2), ARG(3), ARG(5), ARG(6), false, false, true, false},
	[DF_OP_RECEIVE] =
		{DF_OP_RECEIVE, WRITE, ARG(2), ARG(3), 0, ARG(5), true, false, false, false},
	/* (ep, op, add_val, lbuf, cookie, rbuf, flags): lbuf stands for the count */
	[DF_OP_FETCH_ADD] =
		{DF_OP_FETCH_ADD, WRITE, ARG(4), ARG(4), ARG(6), ARG(7), false, false, true, true},
	/* (ep, op, cmp_val, swap_val, lbuf, cookie, rbuf, flags) */
	[DF_OP_CMP_SWAP] =
		{DF_OP_CMP_SWAP, WRITE, ARG(5), ARG(5), ARG(7), ARG(8), false, false, true, true},
	/* (ep, op, segments, lbuf, cookie, rbuf, idata, flags): an RDMA Write in all else */
	[DF_OP_RDMA_WRITE_IMM] = {DF_OP_RDMA_WRITE_IMM, READ, ARG(3), ARG(4), ARG(6), ARG(8),
				  false, false, false, false},
};
#undef READ
#undef WRITE
#undef ARG

#define KNOWN_COMPLETION_FLAGS 0x3F
#define ATOMIC_BYTES 8u /* an atomic's operand, remote word and local result */

struct post {
	const struct post_rule *rule;
	DAT_COUNT num_segments;
	const DAT_LMR_TRIPLET *iov;
	DAT_DTO_COOKIE cookie;
	const DAT_RMR_TRIPLET *remote;
	DAT_COMPLETION_FLAGS flags;
	uint64_t operand, compare; /* the WQE's (the IB extensions only) */
};

static DAT_COUNT max_iov(const struct df_ep *ep, enum df_opcode op)
{
	switch (op) {
	case DF_OP_SEND:
		return ep->attr.max_request_iov;
	case DF_OP_RECEIVE:
		return ep->attr.max_recv_iov;
	case DF_OP_RDMA_WRITE:
	case DF_OP_RDMA_WRITE_IMM:
		return ep->attr.max_rdma_write_iov;
	default: /* a Read, and the atomics: their one segment is written as a Read's */
		return ep->attr.max_rdma_read_iov;
	}
}

/* The local segments (lock held): at most ``max`` of them, their LMRs in ``pz``, privileges
 * and bounds; *total is the bytes they carry. Zero-length segments name no memory and are not
 * checked. */
static DAT_RETURN check_segments(struct df_ia *ia, const struct df_pz *pz, DAT_COUNT max,
				 const struct post *p, uint64_t *total)
{
	*total = 0;
	if (p->num_segments > max || p->num_segments > (DAT_COUNT)DF_WQE_MAX_SEGMENTS)
		return DF_ERROR(DAT_INVALID_PARAMETER, p->rule->count_arg);
	for (DAT_COUNT i = 0; i < p->num_segments; i++) {
		const DAT_LMR_TRIPLET *t = &p->iov[i];
		if (!t->segment_length)
			continue;
		const struct df_lmr *lmr = df_lmr_find(ia, t->lmr_context);
		if (!lmr)
			return DF_ERROR(DAT_PRIVILEGES_VIOLATION, 0);
		if (lmr->pz != pz)
			return DF_ERROR(DAT_PROTECTION_VIOLATION, 0);
		if (p->rule->need & ~lmr->granted)
			return DF_ERROR(DAT_PRIVILEGES_VIOLATION, 0);
		if (t->virtual_address < lmr->address ||
		    t->segment_length > lmr->length ||
		    t->virtual_address - lmr->address > lmr->length - t->segment_length)
			return DF_ERROR(DAT_INVALID_PARAMETER, p->rule->iov_arg);
		*total += t->segment_length;
	}
	return DAT_SUCCESS;
}

/* An EP's post: against its PZ and the limit of the post's kind. */
static DAT_RETURN check_local(struct df_ep *ep, const struct post *p, uint64_t *total)
{
	return check_segments(ep->obj.ia, ep->pz, max_iov(ep, p->rule->opcode), p, total);
}

/* A request's checks that come before its segments (lock held): state, UNSIGNALLED, depth. */
static DAT_RETURN check_request(struct df_ep *ep, const struct post *p)
{
	const DAT_EP_ATTR *a = &ep->attr;
	DAT_EP_STATE state = df_ep_state(ep);
	if (state != DAT_EP_STATE_CONNECTED && state != DAT_EP_STATE_DISCONNECTED)
		return df_ep_state_error(state);
	if ((p->flags & DAT_COMPLETION_UNSIGNALLED_FLAG) &&
	    !(a->request_completion_flags & DAT_COMPLETION_UNSIGNALLED_FLAG))
		return DF_ERROR(DAT_INVALID_PARAMETER, p->rule->flags_arg);
	if (df_ep_requests(ep) >= (uint32_t)a->max_request_dtos)
		return DF_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEP);
	return DAT_SUCCESS;
}

/* An atomic's buffers: exactly 8 local bytes, at least 8 remote bytes, 8-aligned remotely. */
static DAT_RETURN check_atomic(const struct post *p)
{
	if (p->iov[0].segment_length != ATOMIC_BYTES || p->remote->segment_length < ATOMIC_BYTES)
		return DF_ERROR(DAT_LENGTH_ERROR, 0);
	if (p->remote->virtual_address % ATOMIC_BYTES)
		return DF_ERROR(DAT_INVALID_PARAMETER, p->rule->remote_arg);
	return DAT_SUCCESS;
}

/* A request's lengths against the remote buffer and the EP's limits. */
static DAT_RETURN check_lengths(const struct df_ep *ep, const struct post *p, uint64_t total)
{
	const DAT_EP_ATTR *a = &ep->attr;
	const struct post_rule *rule = p->rule;
	if (rule->atomic)
		return check_atomic(p);
	if (rule->send)
		return total > a->max_message_size ? DF_ERROR(DAT_LENGTH_ERROR, 0) : DAT_SUCCESS;
	uint64_t remote = p->remote->segment_length;
	if ((!rule->into_local && total > remote) || (rule->into_local && remote > total))
		return DF_ERROR(DAT_LENGTH_ERROR, 0);
	if (total > a->max_rdma_size || remote > a->max_rdma_size)
		return DF_ERROR(DAT_LENGTH_ERROR, 0);
	return DAT_SUCCESS;
}

/* Write the WQE into the next slot of ``ring`` and publish it (``stage``: where its bytes
 * were staged, or -1). */
static void write_wqe(struct df_ring *ring, const struct post *p, int64_t stage)
{
	struct df_wqe *w = df_ring_slot(ring, ring->mine);
	memset(w, 0, sizeof(*w));
	w->opcode = (uint8_t)p->rule->opcode;
	if (stage >= 0) {
		w->wqe_flags = DF_WQE_STAGED;
		w->stage_offset = (uint32_t)stage;
	}
	w->num_segments = (uint16_t)p->num_segments;
	w->completion_flags = (uint32_t)p->flags;
	w->user_cookie = p->cookie.as_64;
	if (p->remote) { /* an atomic acts on the first 8 bytes of its remote buffer */
		w->remote_address = p->remote->virtual_address;
		w->remote_length = p->rule->atomic ? ATOMIC_BYTES : p->remote->segment_length;
		w->rmr_context = p->remote->rmr_context;
	}
	w->operand = p->operand;
	w->compare = p->compare;
	for (DAT_COUNT i = 0; i < p->num_segments; i++) {
		struct df_wqe_segment *s = &w->segments[i];
		s->virtual_address = p->iov[i].virtual_address;
		s->segment_length = p->iov[i].segment_length;
		s->lmr_context = p->iov[i].lmr_context;
	}
	df_ring_produce(ring, 1); /* release: the slot's bytes before the index */
}

/* Check, write and ring (lock held). */
static DAT_RETURN post_locked(struct df_ep *ep, const struct post *p)
{
	struct df_ia *ia = ep->obj.ia;
	if (ia->chan.dead || ia->broken)
		return DF_ERROR(DAT_ABORT, 0);
	DAT_RETURN ret = df_ep_queues(ep);
	if (ret != DAT_SUCCESS)
		return ret;
	const struct post_rule *rule = p->rule;
	if (rule->receive && ep->srq) /* its receives are posted to the SRQ */
		ret = DF_ERROR(DAT_INVALID_STATE, 0);
	else if (rule->receive)
		ret = df_ep_recvs(ep) >= (uint32_t)ep->attr.max_recv_dtos
			      ? DF_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEP)
			      : DAT_SUCCESS;
	else
		ret = check_request(ep, p);
	uint64_t total = 0;
	if (ret == DAT_SUCCESS)
		ret = check_local(ep, p, &total);
	if (ret == DAT_SUCCESS && !rule->receive)
		ret = check_lengths(ep, p, total);
	if (ret != DAT_SUCCESS)
		return ret;
	struct df_ring *ring = rule->receive ? &ep->rq : &ep->sq;
	if (df_ring_space(ring) <= 0) { /* full (the depth checks keep it from that) or broken */
		df_ia_break(ia, "a work queue's consumer index is out of the ring");
		return DF_ERROR(DAT_ABORT, 0);
	}
	int64_t stage = -1;
	/* a Read or an atomic sends nothing of ours; a fenced request is read as it starts */
	if (!rule->receive)
		stage = df_stage(ep, p->iov, p->num_segments, total,
				 !rule->into_local && !(p->flags & DAT_COMPLETION_BARRIER_FENCE_FLAG));
	write_wqe(ring, p, stage);
	df_full_barrier(); /* "store prod, then load POLL" (section 3) */
	df_ep_ring(ep);
	return DAT_SUCCESS;
}

static DAT_RETURN post(DAT_EP_HANDLE handle, const struct post *p)
{
	struct df_ep *ep = df_obj_check(handle, DAT_HANDLE_TYPE_EP);
	if (!ep)
		return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
	const struct post_rule *rule = p->rule;
	if (p->num_segments < 0)
		return DF_ERROR(DAT_INVALID_PARAMETER, rule->count_arg);
	if (p->num_segments && !p->iov)
		return DF_ERROR(DAT_INVALID_PARAMETER, rule->iov_arg);
	if (p->flags & ~(DAT_COMPLETION_FLAGS)KNOWN_COMPLETION_FLAGS)
		return DF_ERROR(DAT_INVALID_PARAMETER, rule->flags_arg);
	if (rule->receive && (p->flags & DAT_COMPLETION_SUPPRESS_FLAG))
		return DF_ERROR(DAT_INVALID_PARAMETER, rule->flags_arg);
	if (!rule->receive && !rule->send && !p->remote) /* RDMA, atomics: a remote buffer */
		return DF_ERROR(DAT_INVALID_PARAMETER, rule->remote_arg);
	struct df_chan *ch = &ep->obj.ia->chan;
	pthread_mutex_lock(&ch->lock);
	DAT_RETURN ret = post_locked(ep, p);
	pthread_mutex_unlock(&ch->lock);
	return ret;
}

DAT_RETURN df_ep_post_send(DAT_EP_HANDLE ep, DAT_COUNT n, DAT_LMR_TRIPLET *iov,
			   DAT_DTO_COOKIE cookie, DAT_COMPLETION_FLAGS flags)
{
	struct post p = {&rules[DF_OP_SEND], n, iov, cookie, NULL, flags, 0, 0};
	return post(ep, &p);
}

DAT_RETURN df_ep_post_recv(DAT_EP_HANDLE ep, DAT_COUNT n, DAT_LMR_TRIPLET *iov,
			   DAT_DTO_COOKIE cookie, DAT_COMPLETION_FLAGS flags)
{
	struct post p = {&rules[DF_OP_RECEIVE], n, iov, cookie, NULL, flags, 0, 0};
	return post(ep, &p);
}

DAT_RETURN df_ep_post_rdma_write(DAT_EP_HANDLE ep, DAT_COUNT n, DAT_LMR_TRIPLET *iov,
				 DAT_DTO_COOKIE cookie, const DAT_RMR_TRIPLET *remote,
				 DAT_COMPLETION_FLAGS flags)
{
	struct post p = {&rules[DF_OP_RDMA_WRITE], n, iov, cookie, remote, flags, 0, 0};
	return post(ep, &p);
}

DAT_RETURN df_ep_post_rdma_read(DAT_EP_HANDLE ep, DAT_COUNT n, DAT_LMR_TRIPLET *iov,
				DAT_DTO_COOKIE cookie, const DAT_RMR_TRIPLET *remote,
				DAT_COMPLETION_FLAGS flags)
{
	struct post p = {&rules[DF_OP_RDMA_READ], n, iov, cookie, remote, flags, 0, 0};
	return post(ep, &p);
}

/* The IB extensions (ext.c): an atomic is posted as an RDMA Read of 8 bytes into ``local`` */
DAT_RETURN df_ep_post_fetch_and_add(DAT_EP_HANDLE ep, uint64_t add, DAT_LMR_TRIPLET *local,
				    DAT_DTO_COOKIE cookie, const DAT_RMR_TRIPLET *remote,
				    DAT_COMPLETION_FLAGS flags)
{
	struct post p = {&rules[DF_OP_FETCH_ADD], 1, local, cookie, remote, flags, add, 0};
	return post(ep, &p);
}

DAT_RETURN df_ep_post_cmp_and_swap(DAT_EP_HANDLE ep, uint64_t compare, uint64_t swap,
				   DAT_LMR_TRIPLET *local, DAT_DTO_COOKIE cookie,
				   const DAT_RMR_TRIPLET *remote, DAT_COMPLETION_FLAGS flags)
{
	struct post p = {&rules[DF_OP_CMP_SWAP], 1, local, cookie, remote, flags, swap, compare};
	return post(ep, &p);
}

DAT_RETURN df_ep_post_rdma_write_immed(DAT_EP_HANDLE ep, DAT_COUNT n, DAT_LMR_TRIPLET *iov,
				       DAT_DTO_COOKIE cookie, const DAT_RMR_TRIPLET *remote,
				       uint32_t immediate, DAT_COMPLETION_FLAGS flags)
{
	struct post p = {&rules[DF_OP_RDMA_WRITE_IMM], n, iov, cookie, remote, flags, immediate, 0};
	return post(ep, &p);
}

/* An SRQ's receive (srq.c), checked as a dat_ep_post_recv's segments are, against the SRQ's PZ
 * and max_recv_iov (lock held). */
DAT_RETURN df_check_receive(struct df_ia *ia, const struct df_pz *pz, DAT_COUNT max_iov,
			    const DAT_LMR_TRIPLET *iov, DAT_COUNT n)
{
	struct post p = {&rules[DF_OP_RECEIVE], n, iov, {0}, NULL, 0, 0, 0};
	uint64_t total;
	return check_segments(ia, pz, max_iov, &p, &total);
}

/* ...and written into the SRQ's ring as an RQ's receive is, then published (lock held). */
void df_write_receive(struct df_ring *ring, const DAT_LMR_TRIPLET *iov, DAT_COUNT n,
		      DAT_DTO_COOKIE cookie)
{
	struct post p = {&rules[DF_OP_RECEIVE], n, iov, cookie, NULL, DAT_COMPLETION_DEFAULT_FLAG,
			 0, 0};
	write_wqe(ring, &p, -1);
}
