/* Taking events from an EVD's event queue (docs/host-interface.md 6): dat_evd_dequeue (with the
 * nap of a program that polls an empty EVD), dat_evd_wait and the arming both use.
 *
 * Lock: the IA's channel lock guards every EVD's driver-side state. An entry keeps its slot
 * until the program takes it, so the ring holds exactly the events not yet handed out;
 * ``scanned`` counts how far their flags were read. */
#include <sched.h>
#include <string.h>
#include <time.h>

#include "df.h"

static struct df_evd *check_evd(DAT_EVD_HANDLE handle)
{
	return df_obj_check(handle, DAT_HANDLE_TYPE_EVD);
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
/* The running mean of DTO completion lengths, weight 1/8, one completion on: each step moves it at
 * least one toward the length (rounded away from the old mean), so completions all of
 * DF_POLL_BULK bytes reach DF_POLL_BULK (truncated steps stopped up to 7 short of it). The Python
 * client's is the same (client.records.mean_step). */
static int64_t mean_step(int64_t mean, int64_t length)
{
	int64_t d = length - mean;

	return mean + (d >= 0 ? (d + 7) / 8 : -((-d + 7) / 8));
}

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
	if (ret == DAT_SUCCESS)
		df_srq_reap(ia, e); /* an SRQ's receive completion, handed out: it frees the SRQ */
	/* the running mean of the DTO completions' lengths (the IB extensions' too) */
	if (event->event_number == DAT_DTO_COMPLETION_EVENT ||
	    event->event_number == (DAT_EVENT_NUMBER)DAT_IB_DTO_EVENT)
		evd->dto_bytes = mean_step(
			evd->dto_bytes,
			(int64_t)event->event_data.dto_completion_event_data.transfered_length);
	evd->notifying -= e->flags & DF_EQE_NOTIFIES;
	evd->scanned--;
	df_ring_consume(&evd->ring, 1); /* release: the slot is copied out */
	return ret;
}

static int64_t now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Does a program looking at ``evd`` spin before it sleeps? Only on an EVD of DTO completions
 * that are small on average: bulk transfers keep the daemons copying, and every microsecond
 * spun is taken from them; other events (connections, requests) come when they come. */
static bool spins(const struct df_evd *evd)
{
	return evd->flags & DAT_EVD_DTO_FLAG && evd->dto_bytes < DF_POLL_BULK;
}

/* A program that polls an empty EVD holds a core the daemons (the NIC) may need to produce
 * its events. The dequeue then sleeps until the daemon writes an event to this EVD (an armed
 * NOTIFY, as a wait gets) or DF_POLL_NAP_US pass, and takes it if it came (lock held; true when
 * an event is there). When the EVD's transfers are small, the daemons mostly wait for each
 * other's wake-ups and a spinner spares its own: it naps only after DF_POLL_SPIN_US of
 * emptiness. Bulk transfers (a mean of DF_POLL_BULK bytes or more) keep the daemons copying,
 * and every microsecond spun is taken from them: it naps at once. */
static bool nap(struct df_evd *evd)
{
	struct df_chan *ch = &evd->obj.ia->chan;
	int64_t now = now_us();
	if (!evd->empty_since)
		evd->empty_since = now;
	int64_t spin = spins(evd) ? DF_POLL_SPIN_US : 0;
	if (now - evd->empty_since < spin || !evd->ring.hdr || ch->dead)
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

/* Before dat_evd_wait arms and sleeps it looks at the ring for DF_POLL_SPIN_US (after the kick
 * that rings any doorbell a post left): a small transfer completes within one round trip of the
 * daemons, which a sleep and a NOTIFY would double. Only where spins(). Between looks
 * the lock is released and the CPU yielded: other threads post, the daemons may share the core.
 * True while spinning (*until: 0 before the first look, then when the spin ends). */
static bool spin(struct df_evd *evd, int64_t *until)
{
	if (!spins(evd) || !evd->ring.hdr)
		return false;
	int64_t now = now_us();
	if (!*until) {
		df_ia_kick(evd->obj.ia);
		*until = now + DF_POLL_SPIN_US;
	}
	if (now >= *until)
		return false;
	struct df_chan *ch = &evd->obj.ia->chan;
	pthread_mutex_unlock(&ch->lock);
	sched_yield();
	pthread_mutex_lock(&ch->lock);
	return true;
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
	int64_t spin_until = 0;
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
		if (spin(evd, &spin_until))
			continue;
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
