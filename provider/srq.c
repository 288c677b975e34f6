/* Shared receive queues: dat_srq_create, _free, _post_recv, _query, _resize and _set_lw
 * (docs/host-interface.md section 10); dat_ep_create_with_srq is ep.c's.
 *
 * The daemon places an SRQ's ring and writes its state (STATE), the receives completed on any
 * of its EPs (DONE) and the doorbells it took (HEARD); the driver produces the receives and
 * counts the completions it handed out to the program (``reaped``): a receive occupies the
 * SRQ until then. Lock: the IA's channel lock guards every SRQ's driver-side state. */
#include <string.h>

#include "df.h"

static struct df_srq *check_srq(DAT_SRQ_HANDLE handle)
{
	return df_obj_check(handle, DAT_HANDLE_TYPE_SRQ);
}

/* Receives posted and not yet reaped: what occupies the SRQ (lock held). */
static uint32_t outstanding(const struct df_srq *srq)
{
	return srq->ring.mine - srq->reaped;
}

/* Receives posted and not yet completed: those a message may still take (lock held). */
static uint32_t available(const struct df_srq *srq)
{
	return srq->ring.mine -
	       atomic_load_explicit(&srq->ring.hdr->cons_words[DF_WQ_DONE], memory_order_acquire);
}

static DAT_SRQ_STATE srq_state(const struct df_srq *srq)
{
	return (DAT_SRQ_STATE)atomic_load_explicit(&srq->ring.hdr->cons_words[DF_WQ_STATE],
						   memory_order_acquire);
}

/* srq_create [pz, max_recv_dtos, max_recv_iov, low_watermark]. */
struct create_args {
	uint32_t pz;
	const DAT_SRQ_ATTR *attr;
};

static void pack_create(msgpack_packer *pk, const void *arg)
{
	const struct create_args *a = arg;
	msgpack_pack_array(pk, 4);
	msgpack_pack_unsigned_int(pk, a->pz);
	msgpack_pack_int(pk, a->attr->max_recv_dtos);
	msgpack_pack_int(pk, a->attr->max_recv_iov);
	msgpack_pack_int(pk, a->attr->low_watermark);
}

static void pack_srq(msgpack_packer *pk, const void *arg)
{
	msgpack_pack_array(pk, 1);
	msgpack_pack_unsigned_int(pk, *(const uint32_t *)arg);
}

/* Map the ring the daemon placed for SRQ ``handle`` and check its descriptor, as an EP's work
 * queues are (lock held); a segment of the wrong layout loses the IA. */
static DAT_RETURN map_ring(struct df_ia *ia, uint32_t handle, struct df_ring *ring, void **base,
			   size_t *len)
{
	char name[128];
	df_segment_name(name, sizeof(name), ia, "srq", handle);
	*base = df_shm_map(ia, name, len);
	if (!*base)
		return DF_ERROR(DAT_INTERNAL_ERROR, 0);
	if (*len < DF_SRQ_SEGMENT_SIZE ||
	    !df_ring_init(ring, *base, DF_RING_SRQ, DF_WQ_ENTRIES, DF_WQ_ENTRY_SIZE, true)) {
		df_shm_unmap(*base, *len);
		df_ia_break(ia, "an SRQ segment of the wrong layout");
		return DF_ERROR(DAT_INTERNAL_ERROR, 0);
	}
	return DAT_SUCCESS;
}

/* The driver's SRQ for the daemon's ``handle``, its ring mapped (lock held): listed only once
 * its ring is there, as the kick reads the ring of every SRQ listed. */
static DAT_RETURN make_srq(struct df_ia *ia, struct df_pz *pz, uint32_t handle,
			   struct df_srq **out)
{
	struct df_ring ring;
	void *base;
	size_t len = 0;
	DAT_RETURN ret = map_ring(ia, handle, &ring, &base, &len);
	if (ret != DAT_SUCCESS)
		return ret;
	struct df_srq *srq = df_obj_new_locked(ia, sizeof(*srq), DAT_HANDLE_TYPE_SRQ, handle);
	if (!srq) {
		df_shm_unmap(base, len);
		return DF_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	}
	srq->pz = pz;
	srq->seg_len = len;
	srq->ring = ring;
	srq->kicked = ring.mine;
	pthread_mutex_init(&srq->config, NULL);
	*out = srq;
	return DAT_SUCCESS;
}

DAT_RETURN df_srq_create(DAT_IA_HANDLE ia_handle, DAT_PZ_HANDLE pz_handle, DAT_SRQ_ATTR *attr,
			 DAT_SRQ_HANDLE *srq_handle)
{
	struct df_ia *ia = df_obj_check(ia_handle, DAT_HANDLE_TYPE_IA);
	if (!ia)
		return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_IA);
	struct df_pz *pz = df_obj_check(pz_handle, DAT_HANDLE_TYPE_PZ);
	if (!pz || pz->obj.ia != ia)
		return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_PZ);
	if (!attr)
		return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
	if (!srq_handle)
		return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4);
	/* sizes are positive; the watermark lies within the receives (0: none) */
	if (attr->max_recv_dtos <= 0 || attr->max_recv_iov <= 0 || attr->low_watermark < 0 ||
	    attr->low_watermark > attr->max_recv_dtos)
		return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
	/* the ring holds DF_WQ_ENTRIES receives, and no more can be outstanding */
	if (attr->max_recv_dtos > (DAT_COUNT)DF_WQ_ENTRIES)
		return DF_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_SRQ);
	struct create_args a = {pz->obj.handle, attr};
	struct df_reply *r = NULL;
	DAT_RETURN ret = df_call(ia, "srq_create", pack_create, &a, &r);
	if (ret != DAT_SUCCESS)
		return ret; /* the daemon's answer */
	uint64_t handle = 0, dtos = 0, iov = 0;
	ret = df_result_u64(r, 0, &handle);
	if (ret == DAT_SUCCESS)
		ret = df_result_u64(r, 1, &dtos);
	if (ret == DAT_SUCCESS)
		ret = df_result_u64(r, 2, &iov);
	df_reply_free(r);
	/* what the daemon granted must fit the ring and a WQE */
	if (ret == DAT_SUCCESS && (!dtos || dtos > DF_WQ_ENTRIES || !iov || iov > DF_WQE_MAX_SEGMENTS))
		ret = DF_ERROR(DAT_INTERNAL_ERROR, 0);
	if (ret != DAT_SUCCESS)
		return ret;
	uint32_t h = (uint32_t)handle;
	struct df_srq *srq = NULL;
	pthread_mutex_lock(&ia->chan.lock);
	ret = make_srq(ia, pz, h, &srq);
	if (ret == DAT_SUCCESS) {
		srq->max_recv_dtos = (DAT_COUNT)dtos;
		srq->max_recv_iov = (DAT_COUNT)iov;
		srq->low_watermark = attr->low_watermark;
	}
	pthread_mutex_unlock(&ia->chan.lock);
	if (ret != DAT_SUCCESS) {
		df_call(ia, "srq_free", pack_srq, &h, NULL); /* the daemon's side goes too */
		return ret;
	}
	*srq_handle = srq;
	return DAT_SUCCESS;
}

/* Forget an SRQ: unlist it, unmap its ring. An EP still naming it (only a dead daemon frees an
 * SRQ in use) names none from now on. */
void df_srq_destroy(struct df_srq *srq)
{
	struct df_ia *ia = srq->obj.ia;
	pthread_mutex_lock(&ia->chan.lock);
	for (struct df_obj *o = ia->children; o; o = o->next)
		if (o->type == DAT_HANDLE_TYPE_EP && ((struct df_ep *)o)->srq == srq)
			((struct df_ep *)o)->srq = NULL;
	void *seg = srq->ring.hdr;
	size_t len = srq->seg_len;
	pthread_mutex_destroy(&srq->config);
	df_obj_release_locked(&srq->obj);
	pthread_mutex_unlock(&ia->chan.lock);
	df_shm_unmap(seg, len);
}

/* The daemon refuses while an EP uses the SRQ (DAT_INVALID_STATE_SRQ_IN_USE); a dead daemon
 * frees nothing any more, and the handle goes all the same. */
DAT_RETURN df_srq_free(DAT_SRQ_HANDLE handle)
{
	struct df_srq *srq = check_srq(handle);
	if (!srq)
		return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_SRQ);
	DAT_RETURN ret = df_call(srq->obj.ia, "srq_free", df_pack_handle, srq, NULL);
	if (ret != DAT_SUCCESS && DAT_GET_TYPE(ret) != DAT_ABORT)
		return ret;
	df_srq_destroy(srq);
	return DAT_SUCCESS;
}

/* Check, write, ring (lock held): the rules of a dat_ep_post_recv, against the SRQ. */
static DAT_RETURN post_locked(struct df_srq *srq, DAT_COUNT n, const DAT_LMR_TRIPLET *iov,
			      DAT_DTO_COOKIE cookie)
{
	struct df_ia *ia = srq->obj.ia;
	if (ia->chan.dead || ia->broken)
		return DF_ERROR(DAT_ABORT, 0);
	/* valid in every SRQ state (dat_srq_post_recv): the daemon serves receives posted after
	 * one it refused, which put the SRQ in its error state */
	/* a receive occupies the SRQ until its completion is handed out */
	if (outstanding(srq) >= (uint32_t)srq->max_recv_dtos)
		return DF_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_SRQ);
	DAT_RETURN ret = df_check_receive(ia, srq->pz, srq->max_recv_iov, iov, n);
	if (ret != DAT_SUCCESS)
		return ret;
	if (df_ring_space(&srq->ring) <= 0) { /* full (the depth check keeps it from that) or broken */
		df_ia_break(ia, "an SRQ's consumer index is out of the ring");
		return DF_ERROR(DAT_ABORT, 0);
	}
	df_write_receive(&srq->ring, iov, n, cookie);
	df_full_barrier(); /* "store prod, then load HEARD" (section 3) */
	df_srq_ring(srq);
	return DAT_SUCCESS;
}

DAT_RETURN df_srq_post_recv(DAT_SRQ_HANDLE handle, DAT_COUNT n, DAT_LMR_TRIPLET *iov,
			    DAT_DTO_COOKIE cookie)
{
	struct df_srq *srq = check_srq(handle);
	if (!srq)
		return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_SRQ);
	if (n < 0)
		return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	if (n && !iov)
		return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
	struct df_chan *ch = &srq->obj.ia->chan;
	pthread_mutex_lock(&ch->lock);
	DAT_RETURN ret = post_locked(srq, n, iov, cookie);
	pthread_mutex_unlock(&ch->lock);
	return ret;
}

/* Every field is at hand: all are filled, whatever the mask asks. */
DAT_RETURN df_srq_query(DAT_SRQ_HANDLE handle, DAT_SRQ_PARAM_MASK mask, DAT_SRQ_PARAM *p)
{
	struct df_srq *srq = check_srq(handle);
	if (!srq)
		return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_SRQ);
	if (mask & ~DAT_SRQ_FIELD_ALL)
		return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	if (!p)
		return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
	struct df_ia *ia = srq->obj.ia;
	memset(p, 0, sizeof(*p));
	pthread_mutex_lock(&ia->chan.lock);
	p->ia_handle = ia;
	p->srq_state = srq_state(srq);
	p->pz_handle = srq->pz;
	p->max_recv_dtos = srq->max_recv_dtos;
	p->max_recv_iov = srq->max_recv_iov;
	p->low_watermark = srq->low_watermark;
	p->available_dto_count = (DAT_COUNT)available(srq);
	p->outstanding_dto_count = (DAT_COUNT)outstanding(srq);
	pthread_mutex_unlock(&ia->chan.lock);
	return DAT_SUCCESS;
}

/* The driver's alone: the ring already holds the provider's maximum. */
DAT_RETURN df_srq_resize(DAT_SRQ_HANDLE handle, DAT_COUNT max_recv_dtos)
{
	struct df_srq *srq = check_srq(handle);
	if (!srq)
		return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_SRQ);
	if (max_recv_dtos <= 0)
		return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	if (max_recv_dtos > (DAT_COUNT)DF_WQ_ENTRIES)
		return DF_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_SRQ);
	struct df_chan *ch = &srq->obj.ia->chan;
	DAT_RETURN ret = DAT_SUCCESS;
	pthread_mutex_lock(&srq->config);
	pthread_mutex_lock(&ch->lock);
	/* never below the receives it holds, nor below its low watermark */
	if ((uint32_t)max_recv_dtos < outstanding(srq) || max_recv_dtos < srq->low_watermark)
		ret = DF_ERROR(DAT_INVALID_STATE, 0);
	else
		srq->max_recv_dtos = max_recv_dtos;
	pthread_mutex_unlock(&ch->lock);
	pthread_mutex_unlock(&srq->config);
	return ret;
}

/* The daemon arms the low watermark event once (at once if the SRQ holds fewer receives). */
DAT_RETURN df_srq_set_lw(DAT_SRQ_HANDLE handle, DAT_COUNT low_watermark)
{
	struct df_srq *srq = check_srq(handle);
	if (!srq)
		return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_SRQ);
	struct df_chan *ch = &srq->obj.ia->chan;
	pthread_mutex_lock(&srq->config); /* no resize between the check and the store */
	pthread_mutex_lock(&ch->lock);
	DAT_COUNT max = srq->max_recv_dtos;
	pthread_mutex_unlock(&ch->lock);
	DAT_RETURN ret = DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	if (low_watermark >= 0 && low_watermark <= max) {
		struct df_pair args = {srq->obj.handle, (uint64_t)low_watermark};
		ret = df_call(srq->obj.ia, "srq_set_lw", df_pack_pair, &args, NULL);
	}
	if (ret == DAT_SUCCESS) {
		pthread_mutex_lock(&ch->lock);
		srq->low_watermark = low_watermark;
		pthread_mutex_unlock(&ch->lock);
	}
	pthread_mutex_unlock(&srq->config);
	return ret;
}

/* An entry handed out to the program (lock held): a receive completion of an SRQ (a Send's,
 * or a Write with immediate data's) no longer occupies it. The entry names the SRQ: the EP
 * may be freed by now. */
void df_srq_reap(struct df_ia *ia, const struct df_eqe *e)
{
	if (!(e->flags & DF_EQE_SRQ_RECEIVE) || e->body_length < sizeof(uint32_t))
		return;
	uint32_t handle;
	memcpy(&handle, e->body + e->body_length - sizeof(handle), sizeof(handle));
	struct df_srq *srq = df_ia_find(ia, DAT_HANDLE_TYPE_SRQ, handle);
	if (srq)
		srq->reaped++;
}
