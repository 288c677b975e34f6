/* EVDs as objects: create, free, query, software events, enable/disable, (un)waitable; each
 * reads its event queue, a ring the daemon fills (docs/host-interface.md 6), and evd_take.c
 * hands its events out. The driver-side state of every EVD of an IA is guarded by the IA's
 * channel lock. */
#include <stdlib.h>
#include <string.h>

#include "df.h"

static void pack_evd_create(msgpack_packer *pk, const void *arg)
{
	const struct df_evd *evd = arg;
	msgpack_pack_array(pk, 2);
	msgpack_pack_unsigned_int(pk, evd->obj.handle);
	msgpack_pack_int(pk, evd->qlen);
}

static void pack_evd_handle(msgpack_packer *pk, const void *arg)
{
	const struct df_evd *evd = arg;
	msgpack_pack_array(pk, 1);
	msgpack_pack_unsigned_int(pk, evd->obj.handle);
}

static void unmap_queue(struct df_evd *evd)
{
	df_shm_unmap(evd->ring.hdr, evd->map_len);
	evd->ring.hdr = NULL;
}

/* Map the queue the daemon placed for ``evd`` and check it is what its reply said. */
static DAT_RETURN map_queue(struct df_evd *evd, uint64_t entries)
{
	char name[128];
	df_segment_name(name, sizeof(name), evd->obj.ia, "eq", evd->obj.handle);
	void *base = df_shm_map(evd->obj.ia, name, &evd->map_len);
	if (!base)
		return DF_ERROR(DAT_INTERNAL_ERROR, 0);
	evd->ring.hdr = base;
	if (entries > (1u << 16) ||
	    evd->map_len < sizeof(struct df_ring_hdr) + entries * DF_EQ_ENTRY_SIZE ||
	    !df_ring_init(&evd->ring, base, DF_RING_EQ, (uint32_t)entries, DF_EQ_ENTRY_SIZE, false)) {
		unmap_queue(evd);
		return DF_ERROR(DAT_INTERNAL_ERROR, 0);
	}
	evd->armed = atomic_load_explicit(&evd->ring.hdr->cons_words[DF_EQ_ARM], memory_order_relaxed);
	return DAT_SUCCESS;
}

DAT_RETURN df_evd_make(struct df_ia *ia, DAT_COUNT qlen, DAT_EVD_FLAGS flags, uint32_t handle,
		       struct df_evd **out)
{
	struct df_evd *evd = df_obj_new(ia, sizeof(*evd), DAT_HANDLE_TYPE_EVD, handle);
	if (!evd)
		return DF_ERROR(DAT_INSUFFICIENT_RESOURCES, 0);
	evd->qlen = qlen;
	evd->flags = flags;
	evd->enabled = evd->waitable = true;
	uint64_t entries = 0;
	DAT_RETURN ret = df_call_u64(ia, "evd_create", pack_evd_create, evd, &entries);
	if (ret == DAT_SUCCESS)
		ret = map_queue(evd, entries);
	if (ret != DAT_SUCCESS) {
		df_obj_release(&evd->obj);
		return ret;
	}
	*out = evd;
	return DAT_SUCCESS;
}

/* Forget an EVD on the driver's side (its queue is the daemon's to remove). */
void df_evd_destroy(struct df_evd *evd)
{
	/* Unlisted before its queue goes: another thread's dat_cno_wait walks the IA's EVDs
	 * under the lock and reads their rings. */
	struct df_ia *ia = evd->obj.ia;
	pthread_mutex_lock(&ia->chan.lock);
	void *hdr = evd->ring.hdr;
	size_t len = evd->map_len;
	df_obj_release_locked(&evd->obj);
	pthread_mutex_unlock(&ia->chan.lock);
	df_shm_unmap(hdr, len);
}

static struct df_evd *check_evd(DAT_EVD_HANDLE handle)
{
	return df_obj_check(handle, DAT_HANDLE_TYPE_EVD);
}

DAT_RETURN df_evd_create(DAT_IA_HANDLE ia_handle, DAT_COUNT qlen, DAT_CNO_HANDLE cno,
			 DAT_EVD_FLAGS flags, DAT_EVD_HANDLE *evd_handle)
{
	struct df_ia *ia = df_obj_check(ia_handle, DAT_HANDLE_TYPE_IA);
	if (!ia)
		return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_IA);
	if (qlen <= 0) /* the daemon answers for lengths past what it can place */
		return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	struct df_cno *c = NULL;
	if (cno != DAT_HANDLE_NULL) {
		c = df_obj_check(cno, DAT_HANDLE_TYPE_CNO);
		if (!c || c->obj.ia != ia)
			return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_CNO);
	}
	if (flags & ~(DAT_EVD_DEFAULT_FLAG | DAT_EVD_SOFTWARE_FLAG) || !flags)
		return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4);
	if (!evd_handle)
		return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG5);
	pthread_mutex_lock(&ia->chan.lock);
	uint32_t handle = ++ia->next_evd;
	pthread_mutex_unlock(&ia->chan.lock);
	struct df_evd *evd;
	DAT_RETURN ret = df_evd_make(ia, qlen, flags, handle, &evd);
	if (ret != DAT_SUCCESS)
		return ret;
	pthread_mutex_lock(&ia->chan.lock);
	evd->cno = c;
	if (c)
		c->evds++;
	pthread_mutex_unlock(&ia->chan.lock);
	*evd_handle = evd;
	return DAT_SUCCESS;
}

DAT_RETURN df_evd_free(DAT_EVD_HANDLE handle)
{
	struct df_evd *evd = check_evd(handle);
	if (!evd)
		return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_REQUEST);
	if (evd == evd->obj.ia->async_evd)
		return DF_ERROR(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_IN_USE);
	DAT_RETURN ret = df_call(evd->obj.ia, "evd_free", pack_evd_handle, evd, NULL);
	if (ret != DAT_SUCCESS && DAT_GET_TYPE(ret) != DAT_ABORT) /* a dead daemon frees nothing */
		return ret;
	if (evd->cno) {
		pthread_mutex_lock(&evd->obj.ia->chan.lock);
		((struct df_cno *)evd->cno)->evds--;
		pthread_mutex_unlock(&evd->obj.ia->chan.lock);
	}
	df_evd_destroy(evd);
	return DAT_SUCCESS;
}

DAT_RETURN df_evd_query(DAT_EVD_HANDLE handle, DAT_EVD_PARAM_MASK mask, DAT_EVD_PARAM *param)
{
	struct df_evd *evd = check_evd(handle);
	(void)mask;
	if (!evd)
		return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_REQUEST);
	if (!param)
		return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
	param->ia_handle = evd->obj.ia;
	param->evd_qlen = evd->qlen;
	param->evd_state = evd->enabled ? DAT_EVD_STATE_ENABLED : DAT_EVD_STATE_DISABLED;
	param->cno_handle = evd->cno;
	param->evd_flags = evd->flags;
	return DAT_SUCCESS;
}

DAT_RETURN df_evd_post_se(DAT_EVD_HANDLE handle, const DAT_EVENT *event)
{
	struct df_evd *evd = check_evd(handle);
	if (!evd)
		return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_REQUEST);
	if (!event || event->event_number != DAT_SOFTWARE_EVENT)
		return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	if (!(evd->flags & DAT_EVD_SOFTWARE_FLAG))
		return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG1);
	struct df_pair se = {
		evd->obj.handle, (uint64_t)(uintptr_t)event->event_data.software_event_data.pointer
	};
	return df_call(evd->obj.ia, "evd_post_se", df_pack_pair, &se, NULL);
}

DAT_RETURN df_evd_enable(DAT_EVD_HANDLE handle)
{
	struct df_evd *evd = check_evd(handle);
	if (!evd)
		return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_REQUEST);
	evd->enabled = true;
	return DAT_SUCCESS;
}

DAT_RETURN df_evd_disable(DAT_EVD_HANDLE handle)
{
	struct df_evd *evd = check_evd(handle);
	if (!evd)
		return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_REQUEST);
	evd->enabled = false;
	return DAT_SUCCESS;
}

/* dat_evd_set_unwaitable: a waiter returns at once, later waits are refused. */
DAT_RETURN df_evd_set_unwaitable(DAT_EVD_HANDLE handle)
{
	struct df_evd *evd = check_evd(handle);
	if (!evd)
		return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_REQUEST);
	struct df_chan *ch = &evd->obj.ia->chan;
	pthread_mutex_lock(&ch->lock);
	evd->waitable = false;
	df_chan_interrupt(ch);
	pthread_mutex_unlock(&ch->lock);
	return DAT_SUCCESS;
}

DAT_RETURN df_evd_clear_unwaitable(DAT_EVD_HANDLE handle)
{
	struct df_evd *evd = check_evd(handle);
	if (!evd)
		return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_REQUEST);
	struct df_chan *ch = &evd->obj.ia->chan;
	pthread_mutex_lock(&ch->lock);
	evd->waitable = true;
	pthread_mutex_unlock(&ch->lock);
	return DAT_SUCCESS;
}
