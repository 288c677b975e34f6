/* Doorbells (docs/host-interface.md section 5): rung after a post only when the daemon would
 * not look anyway, and the kick that makes good a doorbell skipped in a race of the two
 * sides' stores. An SRQ's ring has a doorbell of its own, named by the SRQ's handle (handles
 * are unique across kinds), by the same rules but for POLL: the daemon never polls an SRQ.
 * Everything here runs with the IA's lock held. */
#include <string.h>

#include "df.h"

/* A DOORBELL frame is a few bytes: packed into a buffer on the stack, no allocation. */
struct small_frame {
	uint8_t bytes[32];
	size_t len;
};

static int small_write(void *data, const char *buf, size_t len)
{
	struct small_frame *f = data;
	if (len > sizeof(f->bytes) - f->len)
		return -1;
	memcpy(f->bytes + f->len, buf, len);
	f->len += len;
	return 0;
}

/* DOORBELL [handle] for the EP or SRQ ``handle``, counted in its *rung. */
static void send_doorbell(struct df_ia *ia, uint32_t handle, uint32_t *rung)
{
	struct small_frame f = {.len = 4}; /* the length prefix, filled by the sender */
	msgpack_packer pk;
	msgpack_packer_init(&pk, &f, small_write);
	msgpack_pack_array(&pk, 3);
	msgpack_pack_unsigned_int(&pk, DF_FRAME_DOORBELL);
	msgpack_pack_unsigned_int(&pk, 0);
	msgpack_pack_unsigned_int(&pk, handle);
	(*rung)++;
	df_send_bytes_locked(&ia->chan, f.bytes, f.len);
}

/* Is a doorbell in flight (sent, not yet counted in the ring's HEARD)? */
static bool rung_unheard(uint32_t rung, const struct df_ring *ring)
{
	return rung != atomic_load_explicit(&ring->hdr->cons_words[DF_WQ_HEARD],
					    memory_order_acquire);
}

static bool in_flight(const struct df_ep *ep)
{
	return rung_unheard(ep->rung, &ep->sq);
}

/* After a post (its index stored, then the full barrier): ring unless the daemon polls the EP
 * (POLL) or a doorbell is in flight. */
void df_ep_ring(struct df_ep *ep)
{
	ep->obj.ia->unkicked = true;
	if (atomic_load_explicit(&ep->sq.hdr->cons_words[DF_WQ_POLL], memory_order_relaxed) ||
	    in_flight(ep))
		return;
	send_doorbell(ep->obj.ia, ep->obj.handle, &ep->rung);
}

/* After a post to an SRQ (its index stored, then the full barrier): ring unless a doorbell is
 * in flight (the daemon looks again after counting it in HEARD). */
void df_srq_ring(struct df_srq *srq)
{
	srq->obj.ia->unkicked = true;
	if (!rung_unheard(srq->rung, &srq->ring))
		send_doorbell(srq->obj.ia, srq->obj.handle, &srq->rung);
}

/* The kick of one EP; true while its queues hold WQEs the daemon has not taken. */
static bool kick_ep(struct df_ep *ep)
{
	if (!ep->wq || (df_ring_space(&ep->sq) == ep->sq.entries &&
			df_ring_space(&ep->rq) == ep->rq.entries))
		return false; /* the daemon took everything */
	if ((ep->sq.mine == ep->kicked_sq && ep->rq.mine == ep->kicked_rq) || in_flight(ep) ||
	    atomic_load_explicit(&ep->sq.hdr->cons_words[DF_WQ_POLL], memory_order_acquire))
		return true;
	ep->kicked_sq = ep->sq.mine;
	ep->kicked_rq = ep->rq.mine;
	send_doorbell(ep->obj.ia, ep->obj.handle, &ep->rung);
	return true;
}

/* The kick of one SRQ: the same, without POLL. */
static bool kick_srq(struct df_srq *srq)
{
	if (df_ring_space(&srq->ring) == srq->ring.entries)
		return false;
	if (srq->ring.mine == srq->kicked || rung_unheard(srq->rung, &srq->ring))
		return true;
	srq->kicked = srq->ring.mine;
	send_doorbell(srq->obj.ia, srq->obj.handle, &srq->rung);
	return true;
}

/* Before a wait, or when an EVD is found empty: one doorbell for each EP or SRQ whose queues
 * hold WQEs the daemon has not taken although no doorbell is in flight and it does not poll
 * the EP, at most once per new producer index. (A daemon that polls looks again without one:
 * it clears POLL only before a last look behind a full barrier.) Once a look finds every queue
 * taken, nothing can be stranded until the next post: a program polling an idle IA pays no
 * walk over its EPs per empty dequeue. */
void df_ia_kick(struct df_ia *ia)
{
	if (ia->chan.dead || ia->broken || !ia->unkicked)
		return;
	bool pending = false;
	for (struct df_obj *o = ia->children; o; o = o->next) {
		if (o->type == DAT_HANDLE_TYPE_EP)
			pending |= kick_ep((struct df_ep *)o);
		else if (o->type == DAT_HANDLE_TYPE_SRQ)
			pending |= kick_srq((struct df_srq *)o);
	}
	ia->unkicked = pending;
}
