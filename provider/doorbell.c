/* Doorbells (docs/host-interface.md section 5): rung after a post only when the daemon would
 * not look anyway, and the kick that makes good a doorbell skipped in a race of the two
 * sides' stores. Everything here runs with the IA's lock held. */
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

static void send_doorbell(struct df_ep *ep)
{
	struct small_frame f = {.len = 4}; /* the length prefix, filled by the sender */
	msgpack_packer pk;
	msgpack_packer_init(&pk, &f, small_write);
	msgpack_pack_array(&pk, 3);
	msgpack_pack_unsigned_int(&pk, DF_FRAME_DOORBELL);
	msgpack_pack_unsigned_int(&pk, 0);
	msgpack_pack_unsigned_int(&pk, ep->obj.handle);
	ep->rung++;
	df_send_bytes_locked(&ep->obj.ia->chan, f.bytes, f.len);
}

/* Is a doorbell of this EP in flight (sent, not yet counted in HEARD)? */
static bool in_flight(const struct df_ep *ep)
{
	return ep->rung != atomic_load_explicit(&ep->sq.hdr->cons_words[DF_WQ_HEARD],
						memory_order_acquire);
}

/* After a post (its index stored, then the full barrier): ring unless the daemon polls the EP
 * (POLL) or a doorbell is in flight. */
void df_ep_ring(struct df_ep *ep)
{
	ep->obj.ia->unkicked = true;
	if (atomic_load_explicit(&ep->sq.hdr->cons_words[DF_WQ_POLL], memory_order_relaxed) ||
	    in_flight(ep))
		return;
	send_doorbell(ep);
}

/* Before a wait, or when an EVD is found empty: one doorbell for each EP whose queues hold
 * WQEs the daemon has not taken although no doorbell is in flight and it does not poll the EP,
 * at most once per new producer index. (A daemon that polls looks again without one: it
 * clears POLL only before a last look behind a full barrier.) Once a look finds every queue
 * taken, nothing can be stranded until the next post: a program polling an idle IA pays no
 * walk over its EPs per empty dequeue. */
void df_ia_kick(struct df_ia *ia)
{
	if (ia->chan.dead || ia->broken || !ia->unkicked)
		return;
	bool pending = false;
	for (struct df_obj *o = ia->children; o; o = o->next) {
		if (o->type != DAT_HANDLE_TYPE_EP)
			continue;
		struct df_ep *ep = (struct df_ep *)o;
		if (!ep->wq || (df_ring_space(&ep->sq) == ep->sq.entries &&
				df_ring_space(&ep->rq) == ep->rq.entries))
			continue; /* the daemon took everything */
		pending = true;
		if ((ep->sq.mine == ep->kicked_sq && ep->rq.mine == ep->kicked_rq) || in_flight(ep) ||
		    atomic_load_explicit(&ep->sq.hdr->cons_words[DF_WQ_POLL], memory_order_acquire))
			continue;
		ep->kicked_sq = ep->sq.mine;
		ep->kicked_rq = ep->rq.mine;
		send_doorbell(ep);
	}
	ia->unkicked = pending;
}
