/* EVDs as objects: create, free, query, software events, enable/disable, (un)waitable,
 * modify_cno and resize; each
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
	struct df_chan *ch = &evd->obj.ia->chan;
	pthread_mutex_lock(&ch->lock);
	bool waited_on = evd->waiting; /* a waiter looks at it between its looks and sleeps */
	pthread_mutex_unlock(&ch->lock);
	if (evd == evd->obj.ia->async_evd || waited_on)
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
	param->evd_state = (DAT_EVD_STATE)((evd->enabled ? DAT_EVD_STATE_ENABLED
							 : DAT_EVD_STATE_DISABLED) |
					   (evd->waitable ? DAT_EVD_STATE_WAITABLE
							  : DAT_EVD_STATE_UNWAITABLE));
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

/* dat_evd_enable / dat_evd_disable: a disabled EVD still queues events, but they wake no
 * waiter of its CNO (cno.c); enabling it wakes that waiter to look again. */
static DAT_RETURN set_enabled(DAT_EVD_HANDLE handle, bool enabled)
{
	struct df_evd *evd = check_evd(handle);
	if (!evd)
		return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_REQUEST);
	struct df_chan *ch = &evd->obj.ia->chan;
	pthread_mutex_lock(&ch->lock);
	evd->enabled = enabled;
	if (enabled)
		df_chan_interrupt(ch);
	pthread_mutex_unlock(&ch->lock);
	return DAT_SUCCESS;
}

DAT_RETURN df_evd_enable(DAT_EVD_HANDLE handle)
{
	return set_enabled(handle, true);
}

DAT_RETURN df_evd_disable(DAT_EVD_HANDLE handle)
{
	return set_enabled(handle, false);
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

/* dat_evd_modify_cno: the CNO the EVD wakes from now on (DAT_HANDLE_NULL: none). A waiter of
 * the new CNO looks at its EVDs again. */
DAT_RETURN df_evd_modify_cno(DAT_EVD_HANDLE handle, DAT_CNO_HANDLE cno_handle)
{
	struct df_evd *evd = check_evd(handle);
	if (!evd)
		return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_REQUEST);
	struct df_cno *cno = NULL;
	if (cno_handle != DAT_HANDLE_NULL) {
		cno = df_obj_check(cno_handle, DAT_HANDLE_TYPE_CNO);
		if (!cno || cno->obj.ia != evd->obj.ia)
			return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_CNO);
	}
	struct df_chan *ch = &evd->obj.ia->chan;
	pthread_mutex_lock(&ch->lock);
	if (evd->cno)
		((struct df_cno *)evd->cno)->evds--;
	evd->cno = cno;
	if (cno)
		cno->evds++;
	df_chan_interrupt(ch);
	pthread_mutex_unlock(&ch->lock);
	return DAT_SUCCESS;
}

/* The daemon moved the queue to a ring of ``entries`` slots under the same segment name
 * (docs/host-interface.md 6, dat_evd_resize): map it, carry our index and our words over (a
 * thread may have taken events or armed since the daemon copied them), and wake the waiters
 * so they look at the new ring (lock held). The old mapping is returned for the caller to
 * unmap once the lock is released. */
static DAT_RETURN remap_queue(struct df_evd *evd, uint64_t entries, void **old, size_t *old_len)
{
	char name[128];
	df_segment_name(name, sizeof(name), evd->obj.ia, "eq", evd->obj.handle);
	size_t len = 0;
	void *base = df_shm_map(evd->obj.ia, name, &len);
	struct df_ring ring;
	if (!base || entries > (1u << 16) ||
	    len < sizeof(struct df_ring_hdr) + entries * DF_EQ_ENTRY_SIZE ||
	    !df_ring_init(&ring, base, DF_RING_EQ, (uint32_t)entries, DF_EQ_ENTRY_SIZE, false)) {
		df_shm_unmap(base, len);
		df_ia_break(evd->obj.ia, "a resized event queue of the wrong layout");
		return DF_ERROR(DAT_INTERNAL_ERROR, 0);
	}
	const struct df_ring_hdr *was = evd->ring.hdr;
	for (int w = DF_EQ_ARM; w <= DF_EQ_WANT; w++)
		atomic_store_explicit(&ring.hdr->cons_words[w],
				      atomic_load_explicit(&was->cons_words[w], memory_order_relaxed),
				      memory_order_relaxed);
	ring.mine = evd->ring.mine;
	atomic_store_explicit(&ring.hdr->cons, ring.mine, memory_order_release);
	*old = evd->ring.hdr;
	*old_len = evd->map_len;
	evd->ring = ring;
	evd->map_len = len;
	df_chan_interrupt(&evd->obj.ia->chan);
	return DAT_SUCCESS;
}

/* dat_evd_resize: DAT_INVALID_STATE while more than ``qlen`` events are queued (the daemon
 * counts them); the daemon enforces the new length. */
DAT_RETURN df_evd_resize(DAT_EVD_HANDLE handle, DAT_COUNT qlen)
{
	struct df_evd *evd = check_evd(handle);
	if (!evd)
		return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_REQUEST);
	if (qlen <= 0)
		return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	struct df_ia *ia = evd->obj.ia;
	struct df_pair args = {evd->obj.handle, (uint64_t)qlen};
	uint64_t entries = 0;
	DAT_RETURN ret = df_call_u64(ia, "evd_resize", df_pack_pair, &args, &entries);
	if (ret != DAT_SUCCESS)
		return ret;
	void *old = NULL;
	size_t old_len = 0;
	pthread_mutex_lock(&ia->chan.lock);
	if (evd->ring.hdr && entries != evd->ring.entries)
		ret = remap_queue(evd, entries, &old, &old_len);
	if (ret == DAT_SUCCESS)
		evd->qlen = qlen;
	pthread_mutex_unlock(&ia->chan.lock);
	df_shm_unmap(old, old_len);
	return ret;
}
