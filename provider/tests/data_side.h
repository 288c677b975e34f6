/* What the data-path C tests (ib_ext, srq_basic) share: one side's IA with its PZ and EVDs,
 * registering the program's own memory, and accepting one connection between two sides. */
#ifndef DF_TEST_DATA_SIDE_H
#define DF_TEST_DATA_SIDE_H

#include <dat2/udat.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#ifndef WAIT_US
#define WAIT_US (20 * 1000 * 1000)
#endif
#define ALL_PRIVS (DAT_MEM_PRIV_LOCAL_READ_FLAG | DAT_MEM_PRIV_LOCAL_WRITE_FLAG | \
		   DAT_MEM_PRIV_REMOTE_READ_FLAG | DAT_MEM_PRIV_REMOTE_WRITE_FLAG)
#define WAIT(evd, want) wait_event_at((evd), (want), WAIT_US, __LINE__)

/* An IA, its async EVD, a PZ, and its connection, CR and DTO EVDs. */
struct base {
	DAT_IA_HANDLE ia;
	DAT_EVD_HANDLE async_evd, conn_evd, dto_evd, cr_evd;
	DAT_PZ_HANDLE pz;
};

/* Open IA ``name`` (a program that cannot has nothing to test: it exits) with the rest;
 * ``dto_flags``: what the DTO EVD takes besides DTO completions. */
static inline void open_base(struct base *s, char *name, DAT_EVD_FLAGS dto_flags)
{
	memset(s, 0, sizeof(*s));
	DAT_RETURN ret = dat_ia_open(name, 8, &s->async_evd, &s->ia);
	if (ret != DAT_SUCCESS) {
		printf("FAILED: dat_ia_open(%s) gave 0x%08x\n", name, (unsigned)ret);
		exit(1);
	}
	CHECK_RET(dat_pz_create(s->ia, &s->pz), DAT_SUCCESS);
	CHECK_RET(dat_evd_create(s->ia, 8, DAT_HANDLE_NULL, DAT_EVD_CONNECTION_FLAG, &s->conn_evd),
		  DAT_SUCCESS);
	CHECK_RET(dat_evd_create(s->ia, 8, DAT_HANDLE_NULL, DAT_EVD_CR_FLAG, &s->cr_evd),
		  DAT_SUCCESS);
	CHECK_RET(dat_evd_create(s->ia, 32, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG | dto_flags,
				 &s->dto_evd),
		  DAT_SUCCESS);
}

/* Free the EVDs and the PZ, close the IA gracefully (nothing else may be left). */
static inline void close_base(struct base *s)
{
	CHECK_RET(dat_evd_free(s->dto_evd), DAT_SUCCESS);
	CHECK_RET(dat_evd_free(s->cr_evd), DAT_SUCCESS);
	CHECK_RET(dat_evd_free(s->conn_evd), DAT_SUCCESS);
	CHECK_RET(dat_pz_free(s->pz), DAT_SUCCESS);
	CHECK_RET(dat_ia_close(s->ia, DAT_CLOSE_GRACEFUL_FLAG), DAT_SUCCESS);
}

/* ``len`` zeroed bytes of the program's heap, 64-aligned (none: nothing to test, it exits). */
static inline void *zeroed(size_t len)
{
	void *p = aligned_alloc(64, len);
	if (!p) {
		printf("FAILED: no memory\n");
		exit(1);
	}
	return memset(p, 0, len);
}

/* An LMR of ``pz`` over the program's own [at, +len), which must come back as asked. */
static inline DAT_LMR_HANDLE register_va(const struct base *s, DAT_PZ_HANDLE pz, void *at,
					 DAT_VLEN len, DAT_MEM_PRIV_FLAGS privs,
					 DAT_LMR_CONTEXT *lctx, DAT_RMR_CONTEXT *rctx)
{
	DAT_REGION_DESCRIPTION region = {.for_va = at};
	DAT_LMR_HANDLE lmr = DAT_HANDLE_NULL;
	DAT_VLEN size = 0;
	DAT_VADDR address = 0;
	CHECK_RET(dat_lmr_create(s->ia, DAT_MEM_TYPE_VIRTUAL, region, len, pz, privs,
				 DAT_VA_TYPE_VA, &lmr, lctx, rctx, &size, &address),
		  DAT_SUCCESS);
	CHECK(size == len && address == (DAT_VADDR)(uintptr_t)at);
	return lmr;
}

/* b's ``b_ep`` connects to a PSP of a's on ``qual``; a accepts with ``a_ep``; both see
 * ESTABLISHED, and the PSP goes. */
static inline void accept_connection(const struct base *a, DAT_EP_HANDLE a_ep,
				     const struct base *b, DAT_EP_HANDLE b_ep, DAT_CONN_QUAL qual)
{
	DAT_IA_ATTR attr;
	DAT_PSP_HANDLE psp = DAT_HANDLE_NULL;
	CHECK_RET(dat_ia_query(a->ia, NULL, DAT_IA_FIELD_ALL, &attr, 0, NULL), DAT_SUCCESS);
	CHECK_RET(dat_psp_create(a->ia, qual, a->cr_evd, DAT_PSP_CONSUMER_FLAG, &psp), DAT_SUCCESS);
	CHECK_RET(dat_ep_connect(b_ep, attr.ia_address_ptr, qual, WAIT_US, 0, NULL,
				 DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG),
		  DAT_SUCCESS);
	DAT_EVENT ev = WAIT(a->cr_evd, DAT_CONNECTION_REQUEST_EVENT);
	CHECK_RET(dat_cr_accept(ev.event_data.cr_arrival_event_data.cr_handle, a_ep, 0, NULL),
		  DAT_SUCCESS);
	WAIT(b->conn_evd, DAT_CONNECTION_EVENT_ESTABLISHED);
	WAIT(a->conn_evd, DAT_CONNECTION_EVENT_ESTABLISHED);
	CHECK_RET(dat_psp_free(psp), DAT_SUCCESS);
}

#endif
