/* Ring indices with the orderings of docs/host-interface.md section 3.
 *
 * Each side keeps its own index in private memory and only stores it; the other side's index
 * is loaded, checked to lie within one ring of ours (else the ring is broken and nothing is
 * read), and only then are slots touched. */
#ifndef DF_QUEUE_H
#define DF_QUEUE_H

#include <stdbool.h>

#include "df-abi.h"

struct df_ring {
	struct df_ring_hdr *hdr;
	uint32_t entries; /* a power of two */
	uint32_t entry_size;
	uint32_t mine; /* this side's index: the only copy this side trusts */
};

/* A ring placed by the daemon: its descriptor must say what the daemon's reply said. */
static inline bool df_ring_init(struct df_ring *r, void *base, enum df_ring_kind kind,
				uint32_t entries, uint32_t entry_size, bool producer)
{
	struct df_ring_hdr *h = base;

	if (h->magic != DF_RING_MAGIC || h->version != DF_HOSTIF_VERSION || h->kind != kind ||
	    h->entries != entries || h->entry_size != entry_size || !entries ||
	    (entries & (entries - 1)))
		return false;
	r->hdr = h;
	r->entries = entries;
	r->entry_size = entry_size;
	/* Our index as we left it (a fresh ring: 0); relaxed, nobody else writes it. */
	r->mine = atomic_load_explicit(producer ? &h->prod : &h->cons, memory_order_relaxed);
	return true;
}

static inline void *df_ring_slot(const struct df_ring *r, uint32_t index)
{
	return (uint8_t *)r->hdr + sizeof(*r->hdr) + (size_t)(index & (r->entries - 1)) * r->entry_size;
}

/* Consumer: entries ready to take, or -1 if the producer's index is past the ring or ran
 * backwards. Acquire: the slots the producer released with its index are visible after it. */
static inline int64_t df_ring_available(const struct df_ring *r)
{
	uint32_t prod = atomic_load_explicit(&r->hdr->prod, memory_order_acquire);
	uint32_t ahead = prod - r->mine;

	return ahead > r->entries ? -1 : (int64_t)ahead;
}

/* Consumer: hand ``count`` entries back. Release: our reads of the slots happen before the
 * producer may reuse them. */
static inline void df_ring_consume(struct df_ring *r, uint32_t count)
{
	r->mine += count;
	atomic_store_explicit(&r->hdr->cons, r->mine, memory_order_release);
}

/* Producer: free slots, or -1 if the consumer's index is past ours or behind by more than the
 * ring. Acquire: the consumer finished reading the slots it released. */
static inline int64_t df_ring_space(const struct df_ring *r)
{
	uint32_t cons = atomic_load_explicit(&r->hdr->cons, memory_order_acquire);
	uint32_t used = r->mine - cons;

	return used > r->entries ? -1 : (int64_t)(r->entries - used);
}

/* Producer: publish ``count`` written slots. Release: the slot bytes are visible first. */
static inline void df_ring_produce(struct df_ring *r, uint32_t count)
{
	r->mine += count;
	atomic_store_explicit(&r->hdr->prod, r->mine, memory_order_release);
}

/* "Store mine, then load theirs" needs a full barrier between (section 3, the full barrier). */
static inline void df_full_barrier(void)
{
	atomic_thread_fence(memory_order_seq_cst);
}

#endif
