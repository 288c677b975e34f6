/* What the SRQ C tests (srq_basic, srq_errors) share: a side with two EPs and one registered
 * buffer, dat_srq_query's counts, the async events an SRQ and its EPs give. */
#ifndef DF_TEST_SRQ_SIDE_H
#define DF_TEST_SRQ_SIDE_H

#include <netinet/in.h> /* before dat_ib_extensions.h: DAT_SOCK_ADDR6 */
#include <dat2/udat.h>
#include <dat2/dat_ib_extensions.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "data_side.h"

#define CONN_QUAL 4717
#define QUIET_US (300 * 1000) /* long enough for a message that could land to land */
#define BUF_LEN 65536
#define SLOT 64 /* receive i lands at a's buffer + i * SLOT */
#define MSG_LEN 16
#define DEPTH 8 /* the SRQ's max_recv_dtos */
#define DEFAULT DAT_COMPLETION_DEFAULT_FLAG
#define COOKIE(i) (0x100u + (uint64_t)(i)) /* of receive i; message i carries 0x200 + i */

/* One side: an IA, its PZ, EVDs, two EPs and one registered buffer. */
struct side {
	struct base b;
	DAT_EP_HANDLE ep[2];
	char *buf;
	DAT_LMR_HANDLE lmr;
	DAT_LMR_CONTEXT lmr_context;
	DAT_RMR_CONTEXT rmr_context;
	DAT_VADDR address;
};

static inline void open_side(struct side *s, char *name)
{
	memset(s, 0, sizeof(*s));
	open_base(&s->b, name, 0);
	s->buf = zeroed(BUF_LEN);
	s->address = (DAT_VADDR)(uintptr_t)s->buf;
	s->lmr = register_va(&s->b, s->b.pz, s->buf, BUF_LEN, ALL_PRIVS, &s->lmr_context,
			     &s->rmr_context);
}

static inline void close_side(struct side *s)
{
	CHECK_RET(dat_lmr_free(s->lmr), DAT_SUCCESS);
	close_base(&s->b);
	free(s->buf);
}


/* a's SRQ counts: dat_srq_query's available_dto_count and outstanding_dto_count. */
static inline void counts(DAT_SRQ_HANDLE srq, DAT_COUNT available, DAT_COUNT outstanding, int line)
{
	DAT_SRQ_PARAM p;
	CHECK_RET(dat_srq_query(srq, DAT_SRQ_FIELD_ALL, &p), DAT_SUCCESS);
	if (p.available_dto_count != available || p.outstanding_dto_count != outstanding) {
		printf("FAILED line %d: available %d, outstanding %d; not %d, %d\n", line,
		       p.available_dto_count, p.outstanding_dto_count, available, outstanding);
		failures++;
	}
}
#define COUNTS(srq, available, outstanding) counts((srq), (available), (outstanding), __LINE__)

/* The next async event: an SRQ's (PROVIDER_INTERNAL_ERROR) or an EP's (EP_BROKEN), taken
 * with a dequeue: it is already there. */
static inline void async_now(struct side *a, DAT_EVENT_NUMBER number, DAT_HANDLE handle,
		      DAT_COUNT reason, int line)
{
	DAT_EVENT ev;
	memset(&ev, 0, sizeof(ev));
	DAT_RETURN ret = dat_evd_dequeue(a->b.async_evd, &ev);
	const DAT_ASYNCH_ERROR_EVENT_DATA *d = &ev.event_data.asynch_error_event_data;
	if (ret != DAT_SUCCESS || ev.event_number != number || d->dat_handle != handle ||
	    d->reason != reason) {
		printf("FAILED line %d: dequeue gave 0x%08x, event 0x%x, handle %p, reason %d\n",
		       line, (unsigned)ret, (unsigned)ev.event_number, d->dat_handle, d->reason);
		failures++;
	}
}
#define LOW_EVENT(a, srq) \
	async_now((a), DAT_ASYNC_ERROR_PROVIDER_INTERNAL_ERROR, (srq), DAT_SRQ_LOW_WATERMARK_EVENT, \
		  __LINE__)
#define NO_ASYNC(a)                                                                      \
	do {                                                                             \
		DAT_EVENT none_;                                                         \
		CHECK_RET(dat_evd_dequeue((a)->b.async_evd, &none_), DAT_QUEUE_EMPTY);     \
	} while (0)

#endif
