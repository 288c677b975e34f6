/* Endpoints: dat_ep_create, dat_ep_create_with_srq, dat_ep_query, dat_ep_modify, dat_ep_free,
 * dat_ep_get_status.
 *
 * The daemon holds the EP's state and writes it into the SQ's STATE word; the driver keeps
 * the attributes it was granted, its EVDs and PZ, and the producer side of its work queues. */
#include <string.h>

#include "df.h"

static uint32_t evd_handle(const struct df_evd *evd)
{
	return evd ? evd->obj.handle : 0;
}

/* ep_create [pz, recv_evd, request_evd, connect_evd, attr], and ep_create_with_srq with the
 * SRQ before the attributes. */
struct ep_create_args {
	const struct df_ia *ia;
	const struct df_pz *pz;
	const struct df_evd *evds[3];
	const struct df_srq *srq; /* NULL: a plain dat_ep_create */
	const DAT_EP_ATTR *attr;
};

static void pack_ep_create(msgpack_packer *pk, const void *arg)
{
	const struct ep_create_args *a = arg;
	msgpack_pack_array(pk, a->srq ? 6 : 5);
	msgpack_pack_unsigned_int(pk, a->pz ? a->pz->obj.handle : 0);
	for (int i = 0; i < 3; i++)
		msgpack_pack_unsigned_int(pk, evd_handle(a->evds[i]));
	if (a->srq)
		msgpack_pack_unsigned_int(pk, a->srq->obj.handle);
	df_pack_ep_attr(pk, a->ia, a->attr);
}

/* An EVD argument: NULL, or a live EVD of this IA. */
static bool evd_ok(struct df_ia *ia, DAT_EVD_HANDLE h, struct df_evd **out)
{
	*out = NULL;
	if (h == DAT_HANDLE_NULL)
		return true;
	struct df_evd *evd = df_obj_check(h, DAT_HANDLE_TYPE_EVD);
	if (!evd || evd->obj.ia != ia)
		return false;
	*out = evd;
	return true;
}

/* A new driver-side EP for a handle the daemon made (dat_ep_create, or a PSP's request). */
struct df_ep *df_ep_new(struct df_ia *ia, uint32_t handle, DAT_EP_STATE known)
{
	struct df_ep *ep = df_obj_new(ia, sizeof(*ep), DAT_HANDLE_TYPE_EP, handle);
	if (ep)
		ep->known = known;
	return ep;
}

/* Both creates: the handles checked in argument order (``with_srq``: the SRQ is the sixth
 * argument and the EP handle's pointer the eighth), the call, then the work queues mapped. */
static DAT_RETURN create(DAT_IA_HANDLE ia_handle, DAT_PZ_HANDLE pz_handle, DAT_EVD_HANDLE recv,
			 DAT_EVD_HANDLE request, DAT_EVD_HANDLE connect, bool with_srq,
			 DAT_SRQ_HANDLE srq_handle, const DAT_EP_ATTR *attr,
			 DAT_EP_HANDLE *ep_handle)
{
	struct df_ia *ia = df_obj_check(ia_handle, DAT_HANDLE_TYPE_IA);
	if (!ia)
		return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_IA);
	struct ep_create_args a = {.ia = ia, .attr = attr};
	if (pz_handle != DAT_HANDLE_NULL) {
		a.pz = df_obj_check(pz_handle, DAT_HANDLE_TYPE_PZ);
		if (!a.pz || a.pz->obj.ia != ia)
			return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_PZ);
	}
	struct df_evd *evds[3];
	if (!evd_ok(ia, recv, &evds[0]))
		return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_RECV);
	if (!evd_ok(ia, request, &evds[1]))
		return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_REQUEST);
	if (!evd_ok(ia, connect, &evds[2]))
		return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_CONN);
	if (with_srq) {
		a.srq = df_obj_check(srq_handle, DAT_HANDLE_TYPE_SRQ);
		if (!a.srq || a.srq->obj.ia != ia)
			return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_SRQ);
	}
	if (!ep_handle)
		return DF_ERROR(DAT_INVALID_PARAMETER, with_srq ? DAT_INVALID_ARG8 : DAT_INVALID_ARG7);
	for (int i = 0; i < 3; i++)
		a.evds[i] = evds[i];
	struct df_reply *r = NULL;
	DAT_RETURN ret = df_call(ia, with_srq ? "ep_create_with_srq" : "ep_create", pack_ep_create,
				 &a, &r);
	if (ret != DAT_SUCCESS)
		return ret;
	uint64_t handle = 0;
	DAT_EP_ATTR granted;
	const msgpack_object_array *res = df_result(r);
	ret = df_result_u64(r, 0, &handle);
	if (ret == DAT_SUCCESS)
		ret = res->size > 1 ? df_read_ep_attr(&res->ptr[1], &granted)
				    : DF_ERROR(DAT_INTERNAL_ERROR, 0);
	df_reply_free(r);
	if (ret != DAT_SUCCESS)
		return ret;
	struct df_ep *ep = df_ep_new(ia, (uint32_t)handle, DAT_EP_STATE_UNCONNECTED);
	if (!ep)
		return DF_ERROR(DAT_INSUFFICIENT_RESOURCES, 0);
	ep->pz = (struct df_pz *)a.pz;
	ep->srq = (struct df_srq *)a.srq;
	ep->recv_evd = evds[0];
	ep->request_evd = evds[1];
	ep->connect_evd = evds[2];
	ep->attr = granted;
	pthread_mutex_lock(&ia->chan.lock);
	ret = df_ep_queues(ep); /* from now on the STATE word is the EP's state */
	pthread_mutex_unlock(&ia->chan.lock);
	if (ret != DAT_SUCCESS) {
		df_ep_destroy(ep); /* the daemon frees its side with the IA */
		return ret;
	}
	*ep_handle = ep;
	return DAT_SUCCESS;
}

DAT_RETURN df_ep_create(DAT_IA_HANDLE ia, DAT_PZ_HANDLE pz, DAT_EVD_HANDLE recv,
			DAT_EVD_HANDLE request, DAT_EVD_HANDLE connect, const DAT_EP_ATTR *attr,
			DAT_EP_HANDLE *ep)
{
	return create(ia, pz, recv, request, connect, false, DAT_HANDLE_NULL, attr, ep);
}

/* An EP whose receives come from the SRQ: dat_ep_post_recv on it is DAT_INVALID_STATE. */
DAT_RETURN df_ep_create_with_srq(DAT_IA_HANDLE ia, DAT_PZ_HANDLE pz, DAT_EVD_HANDLE recv,
				 DAT_EVD_HANDLE request, DAT_EVD_HANDLE connect,
				 DAT_SRQ_HANDLE srq, const DAT_EP_ATTR *attr, DAT_EP_HANDLE *ep)
{
	return create(ia, pz, recv, request, connect, true, srq, attr, ep);
}

/* Map the EP's work queues on first use and check both descriptors (lock held). */
DAT_RETURN df_ep_queues(struct df_ep *ep)
{
	if (ep->wq)
		return DAT_SUCCESS;
	char name[128];
	df_segment_name(name, sizeof(name), ep->obj.ia, "wq", ep->obj.handle);
	size_t len = 0;
	void *base = df_shm_map(ep->obj.ia, name, &len);
	if (!base)
		return DF_ERROR(DAT_INTERNAL_ERROR, 0);
	if (len < DF_WQ_SEGMENT_SIZE ||
	    !df_ring_init(&ep->sq, base, DF_RING_SQ, DF_WQ_ENTRIES, DF_WQ_ENTRY_SIZE, true) ||
	    !df_ring_init(&ep->rq, (uint8_t *)base + DF_RQ_OFFSET, DF_RING_RQ, DF_WQ_ENTRIES,
			  DF_WQ_ENTRY_SIZE, true)) {
		df_shm_unmap(base, len);
		df_ia_break(ep->obj.ia, "a work queue segment of the wrong layout");
		return DF_ERROR(DAT_INTERNAL_ERROR, 0);
	}
	ep->wq = base;
	ep->wq_len = len;
	return DAT_SUCCESS;
}

/* The EP's state: the daemon's STATE word once the queues are mapped (lock held). */
DAT_EP_STATE df_ep_state(const struct df_ep *ep)
{
	if (!ep->wq)
		return ep->known;
	return (DAT_EP_STATE)atomic_load_explicit(&ep->sq.hdr->cons_words[DF_WQ_STATE],
						  memory_order_acquire);
}

/* DAT_INVALID_STATE with the subtype naming the EP's state (proto/ep_states.py). */
DAT_RETURN df_ep_state_error(DAT_EP_STATE state)
{
	switch (state) {
	case DAT_EP_STATE_UNCONNECTED:
		return DF_ERROR(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_UNCONNECTED);
	case DAT_EP_STATE_ACTIVE_CONNECTION_PENDING:
		return DF_ERROR(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_ACTCONNPENDING);
	case DAT_EP_STATE_PASSIVE_CONNECTION_PENDING:
		return DF_ERROR(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_PASSCONNPENDING);
	case DAT_EP_STATE_TENTATIVE_CONNECTION_PENDING:
		return DF_ERROR(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_TENTCONNPENDING);
	case DAT_EP_STATE_RESERVED:
		return DF_ERROR(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_RESERVED);
	case DAT_EP_STATE_COMPLETION_PENDING:
		return DF_ERROR(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_COMPLPENDING);
	case DAT_EP_STATE_DISCONNECT_PENDING:
		return DF_ERROR(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_DISCPENDING);
	default:
		return DF_ERROR(DAT_INVALID_STATE, 0);
	}
}

/* Outstanding requests: WQEs not completed, and RMR binds not completed (lock held). */
uint32_t df_ep_requests(const struct df_ep *ep)
{
	if (!ep->wq)
		return 0;
	const _Atomic uint32_t *w = ep->sq.hdr->cons_words;
	uint32_t binds = ep->binds - atomic_load_explicit(&w[DF_WQ_BOUND], memory_order_acquire);
	uint32_t wqes = ep->sq.mine - atomic_load_explicit(&w[DF_WQ_DONE], memory_order_acquire);
	return wqes + (binds < UINT32_MAX / 2 ? binds : 0);
}

uint32_t df_ep_recvs(const struct df_ep *ep)
{
	if (!ep->wq)
		return 0;
	return ep->rq.mine -
	       atomic_load_explicit(&ep->rq.hdr->cons_words[DF_WQ_DONE], memory_order_acquire);
}

/* Forget an EP: unmap its queues and release the handle. */
void df_ep_destroy(struct df_ep *ep)
{
	/* Unlisted before its queues go: another thread's kick walks the IA's EPs under the lock
	 * and reads their queue words. */
	struct df_ia *ia = ep->obj.ia;
	pthread_mutex_lock(&ia->chan.lock);
	void *wq = ep->wq;
	size_t len = ep->wq_len;
	uint32_t *marks = ep->stage_marks;
	df_obj_release_locked(&ep->obj);
	pthread_mutex_unlock(&ia->chan.lock);
	df_shm_unmap(wq, len);
	free(marks);
}

DAT_RETURN df_ep_free(DAT_EP_HANDLE handle)
{
	struct df_ep *ep = df_obj_check(handle, DAT_HANDLE_TYPE_EP);
	if (!ep)
		return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
	DAT_RETURN ret = df_call(ep->obj.ia, "ep_free", df_pack_handle, ep, NULL);
	if (ret != DAT_SUCCESS && DAT_GET_TYPE(ret) != DAT_ABORT)
		return ret;
	df_ep_destroy(ep);
	return DAT_SUCCESS;
}

DAT_RETURN df_ep_query(DAT_EP_HANDLE handle, DAT_EP_PARAM_MASK mask, DAT_EP_PARAM *p)
{
	struct df_ep *ep = df_obj_check(handle, DAT_HANDLE_TYPE_EP);
	(void)mask; /* every field is at hand: fill them all */
	if (!ep)
		return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
	if (!p)
		return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
	struct df_ia *ia = ep->obj.ia;
	memset(p, 0, sizeof(*p));
	pthread_mutex_lock(&ia->chan.lock);
	p->ia_handle = ia;
	p->ep_state = df_ep_state(ep);
	p->local_ia_address_ptr = (DAT_IA_ADDRESS_PTR)&ia->address;
	p->local_port_qual = ep->local_port_qual;
	p->remote_ia_address_ptr = (DAT_IA_ADDRESS_PTR)&ep->remote_address;
	p->remote_port_qual = ep->remote_port_qual;
	p->pz_handle = ep->pz;
	p->recv_evd_handle = ep->recv_evd;
	p->request_evd_handle = ep->request_evd;
	p->connect_evd_handle = ep->connect_evd;
	p->srq_handle = ep->srq; /* NULL unless made by dat_ep_create_with_srq */
	p->ep_attr = ep->attr;
	pthread_mutex_unlock(&ia->chan.lock);
	return DAT_SUCCESS;
}

DAT_RETURN df_ep_get_status(DAT_EP_HANDLE handle, DAT_EP_STATE *state, DAT_BOOLEAN *recv_idle,
			    DAT_BOOLEAN *request_idle)
{
	struct df_ep *ep = df_obj_check(handle, DAT_HANDLE_TYPE_EP);
	if (!ep)
		return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
	if (!state)
		return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	pthread_mutex_lock(&ep->obj.ia->chan.lock);
	*state = df_ep_state(ep);
	if (recv_idle)
		*recv_idle = df_ep_recvs(ep) == 0 ? DAT_TRUE : DAT_FALSE;
	if (request_idle)
		*request_idle = df_ep_requests(ep) == 0 ? DAT_TRUE : DAT_FALSE;
	pthread_mutex_unlock(&ep->obj.ia->chan.lock);
	return DAT_SUCCESS;
}

/* dat_ep_modify: [ep, {pz?, recv_evd?, request_evd?, connect_evd?, attr?}]. */
struct ep_modify_args {
	const struct df_ep *ep;
	DAT_EP_PARAM_MASK mask;
	const struct df_pz *pz;
	const struct df_evd *evds[3];
	DAT_EP_ATTR attr; /* the EP's attributes with the masked ones replaced */
};

static const DAT_EP_PARAM_MASK evd_bits[3] = {DAT_EP_FIELD_RECV_EVD_HANDLE,
					      DAT_EP_FIELD_REQUEST_EVD_HANDLE,
					      DAT_EP_FIELD_CONNECT_EVD_HANDLE};
static const char *const evd_names[3] = {"recv_evd", "request_evd", "connect_evd"};

static void pack_key(msgpack_packer *pk, const char *key)
{
	msgpack_pack_str(pk, strlen(key));
	msgpack_pack_str_body(pk, key, strlen(key));
}

static void pack_ep_modify(msgpack_packer *pk, const void *arg)
{
	const struct ep_modify_args *a = arg;
	size_t n = !!(a->mask & DAT_EP_FIELD_PZ_HANDLE) + !!(a->mask & DAT_EP_FIELD_EP_ATTR_ALL);
	for (int i = 0; i < 3; i++)
		n += !!(a->mask & evd_bits[i]);
	msgpack_pack_array(pk, 2);
	msgpack_pack_unsigned_int(pk, a->ep->obj.handle);
	msgpack_pack_map(pk, n);
	if (a->mask & DAT_EP_FIELD_PZ_HANDLE) {
		pack_key(pk, "pz");
		msgpack_pack_unsigned_int(pk, a->pz ? a->pz->obj.handle : 0);
	}
	for (int i = 0; i < 3; i++) {
		if (a->mask & evd_bits[i]) {
			pack_key(pk, evd_names[i]);
			msgpack_pack_unsigned_int(pk, evd_handle(a->evds[i]));
		}
	}
	if (a->mask & DAT_EP_FIELD_EP_ATTR_ALL) {
		pack_key(pk, "attr");
		df_pack_ep_attr(pk, a->ep->obj.ia, &a->attr);
	}
}

#define MODIFIABLE                                                                           \
	(DAT_EP_FIELD_PZ_HANDLE | DAT_EP_FIELD_RECV_EVD_HANDLE | DAT_EP_FIELD_REQUEST_EVD_HANDLE | \
	 DAT_EP_FIELD_CONNECT_EVD_HANDLE | (DAT_EP_FIELD_EP_ATTR_ALL &                          \
					    ~(DAT_EP_FIELD_EP_ATTR_SRQ_SOFT_HW |               \
					      DAT_EP_FIELD_EP_ATTR_NUM_TRANSPORT_ATTR |        \
					      DAT_EP_FIELD_EP_ATTR_TRANSPORT_SPECIFIC_ATTR |   \
					      DAT_EP_FIELD_EP_ATTR_NUM_PROVIDER_ATTR |         \
					      DAT_EP_FIELD_EP_ATTR_PROVIDER_SPECIFIC_ATTR)))

DAT_RETURN df_ep_modify(DAT_EP_HANDLE handle, DAT_EP_PARAM_MASK mask, const DAT_EP_PARAM *p)
{
	struct df_ep *ep = df_obj_check(handle, DAT_HANDLE_TYPE_EP);
	if (!ep)
		return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
	if (!p || !mask || (mask & ~MODIFIABLE))
		return DF_ERROR(DAT_INVALID_PARAMETER, p ? DAT_INVALID_ARG2 : DAT_INVALID_ARG3);
	struct df_ia *ia = ep->obj.ia;
	struct ep_modify_args a = {.ep = ep, .mask = mask, .attr = ep->attr};
	if ((mask & DAT_EP_FIELD_PZ_HANDLE) && p->pz_handle != DAT_HANDLE_NULL) {
		a.pz = df_obj_check(p->pz_handle, DAT_HANDLE_TYPE_PZ);
		if (!a.pz || a.pz->obj.ia != ia)
			return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_PZ);
	}
	const DAT_EVD_HANDLE given[3] = {p->recv_evd_handle, p->request_evd_handle,
					 p->connect_evd_handle};
	struct df_evd *evds[3] = {ep->recv_evd, ep->request_evd, ep->connect_evd};
	for (int i = 0; i < 3; i++) {
		if ((mask & evd_bits[i]) && !evd_ok(ia, given[i], &evds[i]))
			return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_CONN);
		a.evds[i] = evds[i];
	}
	df_merge_ep_attr(&a.attr, &p->ep_attr, mask);
	struct df_reply *r = NULL;
	DAT_RETURN ret = df_call(ia, "ep_modify", pack_ep_modify, &a, &r);
	if (ret != DAT_SUCCESS)
		return ret;
	DAT_EP_ATTR granted;
	const msgpack_object_array *res = df_result(r);
	ret = res->size ? df_read_ep_attr(&res->ptr[0], &granted) : DF_ERROR(DAT_INTERNAL_ERROR, 0);
	df_reply_free(r);
	if (ret != DAT_SUCCESS)
		return ret;
	pthread_mutex_lock(&ia->chan.lock);
	if (mask & DAT_EP_FIELD_PZ_HANDLE)
		ep->pz = (struct df_pz *)a.pz;
	ep->recv_evd = evds[0];
	ep->request_evd = evds[1];
	ep->connect_evd = evds[2];
	ep->attr = granted;
	pthread_mutex_unlock(&ia->chan.lock);
	return DAT_SUCCESS;
}
