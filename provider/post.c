/* The four posts: dat_ep_post_send, dat_ep_post_recv, dat_ep_post_rdma_write and
 * dat_ep_post_rdma_read (docs/host-interface.md sections 4 and 5).
 *
 * Every synchronous check the manual pages require is made here, under the IA's lock, before
 * the WQE is written; a WQE in the ring is a post that was accepted. A doorbell is rung only
 * when the daemon would not look anyway. */
#include <string.h>

#include "df.h"

/* What depends on the kind of post. */
struct post_rule {
	enum df_opcode opcode;
	DAT_MEM_PRIV_FLAGS need; /* the local privilege the local segments must grant */
	DAT_RETURN flags_arg; /* the argument number the completion flags are */
	bool receive, send, into_local;
};

#define READ DAT_MEM_PRIV_LOCAL_READ_FLAG
#define WRITE DAT_MEM_PRIV_LOCAL_WRITE_FLAG
static const struct post_rule rules[] = {
	/*                   opcode            need   flags_arg         receive send   into_local */
	[DF_OP_SEND] =       {DF_OP_SEND,       READ,  DAT_INVALID_ARG5, false,  true,  false},
	[DF_OP_RDMA_WRITE] = {DF_OP_RDMA_WRITE, READ,  DAT_INVALID_ARG6, false,  false, false},
	[DF_OP_RDMA_READ] =  {DF_OP_RDMA_READ,  WRITE, DAT_INVALID_ARG6, false,  false, true},
	[DF_OP_RECEIVE] =    {DF_OP_RECEIVE,    WRITE, DAT_INVALID_ARG5, true,   false, false},
};
#undef READ
#undef WRITE

#define KNOWN_COMPLETION_FLAGS 0x3F

struct post {
	const struct post_rule *rule;
	DAT_COUNT num_segments;
	const DAT_LMR_TRIPLET *iov;
	DAT_DTO_COOKIE cookie;
	const DAT_RMR_TRIPLET *remote;
	DAT_COMPLETION_FLAGS flags;
};

static DAT_COUNT max_iov(const struct df_ep *ep, enum df_opcode op)
{
	switch (op) {
	case DF_OP_SEND:
		return ep->attr.max_request_iov;
	case DF_OP_RECEIVE:
		return ep->attr.max_recv_iov;
	case DF_OP_RDMA_WRITE:
		return ep->attr.max_rdma_write_iov;
	default:
		return ep->attr.max_rdma_read_iov;
	}
}

/* The local segments (lock held): their LMRs, PZ, privileges and bounds; *total is the bytes
 * they carry. Zero-length segments name no memory and are not checked. */
static DAT_RETURN check_local(struct df_ep *ep, const struct post *p, uint64_t *total)
{
	*total = 0;
	if (p->num_segments > max_iov(ep, p->rule->opcode) ||
	    p->num_segments > (DAT_COUNT)DF_WQE_MAX_SEGMENTS)
		return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	for (DAT_COUNT i = 0; i < p->num_segments; i++) {
		const DAT_LMR_TRIPLET *t = &p->iov[i];
		if (!t->segment_length)
			continue;
		const struct df_lmr *lmr = df_lmr_find(ep->obj.ia, t->lmr_context);
		if (!lmr)
			return DF_ERROR(DAT_PRIVILEGES_VIOLATION, 0);
		if (lmr->pz != ep->pz)
			return DF_ERROR(DAT_PROTECTION_VIOLATION, 0);
		if (p->rule->need & ~lmr->granted)
			return DF_ERROR(DAT_PRIVILEGES_VIOLATION, 0);
		if (t->virtual_address < lmr->address ||
		    t->segment_length > lmr->length ||
		    t->virtual_address - lmr->address > lmr->length - t->segment_length)
			return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
		*total += t->segment_length;
	}
	return DAT_SUCCESS;
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

/* A request's lengths against the remote buffer and the EP's limits. */
static DAT_RETURN check_lengths(const struct df_ep *ep, const struct post *p, uint64_t total)
{
	const DAT_EP_ATTR *a = &ep->attr;
	const struct post_rule *rule = p->rule;
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
	if (p->remote) {
		w->remote_address = p->remote->virtual_address;
		w->remote_length = p->remote->segment_length;
		w->rmr_context = p->remote->rmr_context;
	}
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
	if (rule->receive)
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
	if (!rule->receive) /* a Read sends nothing of ours; a fenced request is read as it starts */
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
	if (p->num_segments < 0)
		return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	if (p->num_segments && !p->iov)
		return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
	if (p->flags & ~(DAT_COMPLETION_FLAGS)KNOWN_COMPLETION_FLAGS)
		return DF_ERROR(DAT_INVALID_PARAMETER, p->rule->flags_arg);
	if (p->rule->receive && (p->flags & DAT_COMPLETION_SUPPRESS_FLAG))
		return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG5);
	if (!p->rule->receive && !p->rule->send && !p->remote)
		return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG5);
	struct df_chan *ch = &ep->obj.ia->chan;
	pthread_mutex_lock(&ch->lock);
	DAT_RETURN ret = post_locked(ep, p);
	pthread_mutex_unlock(&ch->lock);
	return ret;
}

DAT_RETURN df_ep_post_send(DAT_EP_HANDLE ep, DAT_COUNT n, DAT_LMR_TRIPLET *iov,
			   DAT_DTO_COOKIE cookie, DAT_COMPLETION_FLAGS flags)
{
	struct post p = {&rules[DF_OP_SEND], n, iov, cookie, NULL, flags};
	return post(ep, &p);
}

DAT_RETURN df_ep_post_recv(DAT_EP_HANDLE ep, DAT_COUNT n, DAT_LMR_TRIPLET *iov,
			   DAT_DTO_COOKIE cookie, DAT_COMPLETION_FLAGS flags)
{
	struct post p = {&rules[DF_OP_RECEIVE], n, iov, cookie, NULL, flags};
	return post(ep, &p);
}

DAT_RETURN df_ep_post_rdma_write(DAT_EP_HANDLE ep, DAT_COUNT n, DAT_LMR_TRIPLET *iov,
				 DAT_DTO_COOKIE cookie, const DAT_RMR_TRIPLET *remote,
				 DAT_COMPLETION_FLAGS flags)
{
	struct post p = {&rules[DF_OP_RDMA_WRITE], n, iov, cookie, remote, flags};
	return post(ep, &p);
}

DAT_RETURN df_ep_post_rdma_read(DAT_EP_HANDLE ep, DAT_COUNT n, DAT_LMR_TRIPLET *iov,
				DAT_DTO_COOKIE cookie, const DAT_RMR_TRIPLET *remote,
				DAT_COMPLETION_FLAGS flags)
{
	struct post p = {&rules[DF_OP_RDMA_READ], n, iov, cookie, remote, flags};
	return post(ep, &p);
}
