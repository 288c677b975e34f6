/* EVDs: each reads its event queue, a ring the daemon fills (docs/host-interface.md 6).
 *
 * The driver-side state of every EVD of an IA is guarded by the IA's channel lock. Entries keep
 * their slots until the program takes them (dat_evd_dequeue, dat_evd_wait), so the ring holds
 * exactly the events not yet handed out; ``scanned`` counts how far their flags were read. */
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
	void *base = df_shm_map(name, &evd->map_len);
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

/* Entries in the queue, counting the flags of the ones not seen before (lock held); -1 when
 * the daemon broke the ring, which loses the IA. */
int64_t df_evd_refill(struct df_evd *evd)
{
	struct df_ia *ia = evd->obj.ia;
	if (!evd->ring.hdr || ia->broken)
		return 0;
	int64_t avail = df_ring_available(&evd->ring);
	if (avail < 0) {
		df_ia_break(ia, "an event queue's producer index is past the ring");
		return -1;
	}
	for (; evd->scanned < (uint32_t)avail; evd->scanned++) {
		const struct df_eqe *e = df_ring_slot(&evd->ring, evd->ring.mine + evd->scanned);
		if (e->rsvd || e->body_length > DF_EQE_BODY_MAX) {
			df_ia_break(ia, "an event queue entry the driver cannot read");
			return -1;
		}
		evd->notifying += e->flags & DF_EQE_NOTIFIES;
	}
	return avail;
}

/* The async EVD of a dead IA reports IA_CATASTROPHIC once, after what its ring held. */
static bool catastrophic_pending(const struct df_evd *evd)
{
	const struct df_ia *ia = evd->obj.ia;
	return ia->chan.dead && ia->async_evd == evd && !ia->catastrophic_told;
}

/* Hand out the oldest event (lock held; one is there): fill ``event`` and free its slot. */
static DAT_RETURN take(struct df_evd *evd, DAT_EVENT *event)
{
	struct df_ia *ia = evd->obj.ia;
	memset(event, 0, sizeof(*event));
	event->evd_handle = evd;
	if (!evd->scanned) { /* only the catastrophe is left */
		ia->catastrophic_told = true;
		event->event_number = DAT_ASYNC_ERROR_IA_CATASTROPHIC;
		event->event_data.asynch_error_event_data.dat_handle = ia;
		event->event_data.asynch_error_event_data.reason = DAT_IA_CATASTROPHIC_ERROR;
		return DAT_SUCCESS;
	}
	const struct df_eqe *e = df_ring_slot(&evd->ring, evd->ring.mine);
	DAT_RETURN ret = df_event_from_entry(ia, e, event);
	evd->notifying -= e->flags & DF_EQE_NOTIFIES;
	evd->scanned--;
	df_ring_consume(&evd->ring, 1); /* release: the slot is copied out */
	return ret;
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

static int64_t now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* A program that polls an empty EVD for DF_POLL_SPIN_US holds a core the daemons (the NIC)
 * need to produce its events: the dequeue then sleeps until the daemon writes an event to this
 * EVD (an armed NOTIFY, as a wait gets) or DF_POLL_NAP_US pass, and takes it if it came (lock
 * held; true when an event is there). */
static bool nap(struct df_evd *evd)
{
	struct df_chan *ch = &evd->obj.ia->chan;
	int64_t now = now_us();
	if (!evd->empty_since)
		evd->empty_since = now;
	if (now - evd->empty_since < DF_POLL_SPIN_US || !evd->ring.hdr || ch->dead)
		return false;
	df_evd_arm(evd, 1);
	if (df_evd_refill(evd) <= 0) {
		struct timespec deadline;
		df_deadline_after(&deadline, DF_POLL_NAP_US);
		df_pump_locked(ch, &deadline);
	}
	evd->empty_since = now_us();
	return df_evd_refill(evd) > 0;
}

DAT_RETURN df_evd_dequeue(DAT_EVD_HANDLE handle, DAT_EVENT *event)
{
	struct df_evd *evd = check_evd(handle);
	if (!evd)
		return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_REQUEST);
	if (!event)
		return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	struct df_chan *ch = &evd->obj.ia->chan;
	pthread_mutex_lock(&ch->lock);
	/* An empty queue is a status, not a failure: plain DAT_QUEUE_EMPTY, as OFED's dapl gives
	 * and as polling loops compare it (Debian's dtest: "== DAT_QUEUE_EMPTY"). */
	DAT_RETURN ret = DAT_QUEUE_EMPTY;
	if (evd->waiting)
		ret = DF_ERROR(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_WAITER);
	else if (df_evd_refill(evd) > 0 || catastrophic_pending(evd))
		ret = take(evd, event);
	else {
		df_ia_kick(evd->obj.ia); /* empty: no post of ours may be stranded (section 5) */
		if (nap(evd))
			ret = take(evd, event);
	}
	if (ret != DAT_QUEUE_EMPTY)
		evd->empty_since = 0;
	pthread_mutex_unlock(&ch->lock);
	if (ret == DAT_QUEUE_EMPTY)
		sched_yield(); /* a program polling us holds a CPU the daemons (the NIC) may need */
	return ret;
}

/* Would a waiter for ``threshold`` events wake, with ``n`` queued? Only if one of them is a
 * notification: an UNSIGNALLED completion wakes nobody. */
static bool ready(const struct df_evd *evd, int64_t n, DAT_COUNT threshold)
{
	return n >= threshold && evd->notifying;
}

/* Ask the daemon for a NOTIFY once ``threshold`` events are queued (lock held), then the full
 * barrier: the caller's next look at the ring is ordered after the ARM. */
void df_evd_arm(struct df_evd *evd, DAT_COUNT threshold)
{
	struct df_ring_hdr *h = evd->ring.hdr;
	if (!h)
		return;
	atomic_store_explicit(&h->cons_words[DF_EQ_WANT], (uint32_t)threshold, memory_order_relaxed);
	if (atomic_load_explicit(&h->prod_words[DF_EQ_NOTIFIED], memory_order_relaxed) == evd->armed) {
		evd->armed++;
		atomic_store_explicit(&h->cons_words[DF_EQ_ARM], evd->armed, memory_order_relaxed);
	}
	df_full_barrier();
}

/* dat_evd_wait: wake when ``threshold`` events are queued, one of them a notification (an
 * UNSIGNALLED completion wakes nobody), or on timeout with the count in *nmore. */
DAT_RETURN df_evd_wait(DAT_EVD_HANDLE handle, DAT_TIMEOUT timeout, DAT_COUNT threshold,
		       DAT_EVENT *event, DAT_COUNT *nmore)
{
	struct df_evd *evd = check_evd(handle);
	if (!evd)
		return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_REQUEST);
	if (threshold <= 0 || threshold > evd->qlen)
		return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
	if (!event)
		return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4);
	if (!nmore)
		return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG5);
	struct df_chan *ch = &evd->obj.ia->chan;
	struct timespec deadline;
	if (timeout != DAT_TIMEOUT_INFINITE)
		df_deadline_after(&deadline, timeout);
	pthread_mutex_lock(&ch->lock);
	DAT_RETURN ret = DAT_SUCCESS;
	if (evd->waiting)
		ret = DF_ERROR(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_WAITER);
	else if (!evd->waitable)
		ret = DF_ERROR(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_UNWAITABLE);
	else if (evd->ring.hdr && atomic_load(&evd->ring.hdr->prod_words[DF_EQ_OVERFLOW]))
		ret = DF_ERROR(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_IN_USE);
	if (ret != DAT_SUCCESS) {
		pthread_mutex_unlock(&ch->lock);
		return ret;
	}
	evd->waiting = true;
	for (;;) {
		int64_t n = df_evd_refill(evd);
		if (ready(evd, n, threshold) || catastrophic_pending(evd)) {
			ret = take(evd, event);
			*nmore = (DAT_COUNT)(n > 0 ? n - 1 : 0);
			break;
		}
		if (ch->dead || !evd->waitable) {
			ret = ch->dead ? DF_ERROR(DAT_ABORT, 0)
				       : DF_ERROR(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_UNWAITABLE);
			*nmore = (DAT_COUNT)(n > 0 ? n : 0);
			break;
		}
		if (timeout != DAT_TIMEOUT_INFINITE && df_deadline_passed(&deadline)) {
			ret = DF_ERROR(DAT_TIMEOUT_EXPIRED, 0);
			*nmore = (DAT_COUNT)(n > 0 ? n : 0);
			break;
		}
		df_evd_arm(evd, threshold);
		n = df_evd_refill(evd); /* what came before the ARM is seen now */
		if (ready(evd, n, threshold) || ch->dead)
			continue;
		df_ia_kick(evd->obj.ia); /* before blocking: no post may be stranded (section 5) */
		df_pump_locked(ch, timeout == DAT_TIMEOUT_INFINITE ? NULL : &deadline);
	}
	evd->waiting = false;
	pthread_mutex_unlock(&ch->lock);
	return ret;
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
