/* The staging area of an EP's work queue segment (docs/host-interface.md section 4).
 *
 * The daemon reaches this process's registered memory with cross-memory attach, which costs it
 * a system call and a copy per request; for an unfenced Send or RDMA Write the driver copies
 * the bytes into the staging area when it posts instead, and the daemon sends them from there.
 * The area is a byte ring: a request's bytes are contiguous (a request that would cross the end
 * starts again at 0), taken at ``stage_head`` and given back in posting order once the daemon
 * counts the request's completion in DONE (completions leave in posting order). A fenced
 * request is never staged: it must carry the bytes as they are when it starts, after the reads
 * it waits for have landed. */
#include <stdlib.h>
#include <string.h>

#include "df.h"

/* Give back what the requests completed since the last look had taken (lock held). */
static void give_back(struct df_ep *ep)
{
	uint32_t done = atomic_load_explicit(&ep->sq.hdr->cons_words[DF_WQ_DONE],
					     memory_order_acquire);
	if (done == ep->stage_done) /* also before the first completion: slot DONE - 1 holds none */
		return;
	ep->stage_done = done;
	ep->stage_tail = ep->stage_marks[(done - 1) & (DF_WQ_ENTRIES - 1)];
}

/* Where the next ``total`` bytes go, or -1 when the area has no room for them now. */
static int64_t reserve(struct df_ep *ep, uint32_t total)
{
	uint32_t at = ep->stage_head & (DF_STAGE_BYTES - 1);
	uint32_t skip = at + total > DF_STAGE_BYTES ? DF_STAGE_BYTES - at : 0;
	uint32_t used = ep->stage_head - ep->stage_tail;
	if (used > DF_STAGE_BYTES || DF_STAGE_BYTES - used < skip + total)
		return -1;
	ep->stage_head += skip + total;
	return skip ? 0 : at;
}

int64_t df_stage(struct df_ep *ep, const DAT_LMR_TRIPLET *iov, DAT_COUNT n, uint64_t total,
		 bool stageable)
{
	uint32_t slot = ep->sq.mine & (DF_WQ_ENTRIES - 1);
	int64_t at = -1;
	stageable = stageable && total && total <= DF_STAGE_BYTES;
	if (!ep->stage_marks && stageable) /* zeros: every earlier post staged nothing */
		ep->stage_marks = calloc(DF_WQ_ENTRIES, sizeof(*ep->stage_marks));
	if (!ep->stage_marks)
		return -1;
	give_back(ep);
	if (stageable)
		at = reserve(ep, (uint32_t)total);
	if (at >= 0) {
		uint8_t *dst = (uint8_t *)ep->wq + DF_STAGE_OFFSET + at;
		for (DAT_COUNT i = 0; i < n; i++) {
			if (!iov[i].segment_length) /* names no memory (post.c checks none) */
				continue;
			memcpy(dst, (const void *)(uintptr_t)iov[i].virtual_address,
			       iov[i].segment_length);
			dst += iov[i].segment_length;
		}
	}
	ep->stage_marks[slot] = ep->stage_head;
	return at;
}
