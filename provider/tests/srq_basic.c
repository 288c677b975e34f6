/* Shared receive queues through libdat2, between two IAs of one program connected over the
 * fabric: dat_srq_create, _query, _post_recv, _resize, _set_lw, _free and
 * dat_ep_create_with_srq, their argument errors, and the receives of one SRQ taken in posting
 * order by the two EPs that share it.
 *
 * usage: srq_basic IA_NAME
 * Side a (the receiver) has an SRQ and two EPs created with it; side b sends on two plain EPs,
 * each connected to one of them. Prints "PASSED" and exits 0 when every check holds; each
 * failed check prints its line. */
#define _GNU_SOURCE
#include <netinet/in.h> /* before dat_ib_extensions.h: DAT_SOCK_ADDR6 */
#include <dat2/udat.h>
#include <dat2/dat_ib_extensions.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"

#define CONN_QUAL 4717
#define WAIT_US (20 * 1000 * 1000)
#define QUIET_US (300 * 1000) /* long enough for a message that could land to land */
#define BUF_LEN 65536
#define SLOT 64 /* receive i lands at a's buffer + i * SLOT */
#define MSG_LEN 16
#define DEPTH 8 /* the SRQ's max_recv_dtos */
#define ALL_PRIVS (DAT_MEM_PRIV_LOCAL_READ_FLAG | DAT_MEM_PRIV_LOCAL_WRITE_FLAG | \
		   DAT_MEM_PRIV_REMOTE_READ_FLAG | DAT_MEM_PRIV_REMOTE_WRITE_FLAG)
#define DEFAULT DAT_COMPLETION_DEFAULT_FLAG
#define COOKIE(i) (0x100u + (uint64_t)(i)) /* of receive i; message i carries 0x200 + i */

/* One side: an IA, its PZ, EVDs, two EPs and one registered buffer. */
struct side {
	DAT_IA_HANDLE ia;
	DAT_EVD_HANDLE async_evd, conn_evd, dto_evd, cr_evd;
	DAT_PZ_HANDLE pz;
	DAT_EP_HANDLE ep[2];
	char *buf;
	DAT_LMR_HANDLE lmr;
	DAT_LMR_CONTEXT lmr_context;
	DAT_RMR_CONTEXT rmr_context;
	DAT_VADDR address;
};

static DAT_LMR_HANDLE register_va(DAT_IA_HANDLE ia, DAT_PZ_HANDLE pz, void *at, DAT_VLEN len,
				  DAT_MEM_PRIV_FLAGS privs, DAT_LMR_CONTEXT *lctx,
				  DAT_RMR_CONTEXT *rctx)
{
	DAT_REGION_DESCRIPTION region = {.for_va = at};
	DAT_LMR_HANDLE lmr = DAT_HANDLE_NULL;
	DAT_VLEN size = 0;
	DAT_VADDR address = 0;
	CHECK_RET(dat_lmr_create(ia, DAT_MEM_TYPE_VIRTUAL, region, len, pz, privs, DAT_VA_TYPE_VA,
				 &lmr, lctx, rctx, &size, &address),
		  DAT_SUCCESS);
	CHECK(size == len && address == (DAT_VADDR)(uintptr_t)at);
	return lmr;
}

static void open_side(struct side *s, char *name)
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
	CHECK_RET(dat_evd_create(s->ia, 32, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &s->dto_evd),
		  DAT_SUCCESS);
	s->buf = aligned_alloc(64, BUF_LEN);
	if (!s->buf) {
		printf("FAILED: no memory\n");
		exit(1);
	}
	memset(s->buf, 0, BUF_LEN);
	s->address = (DAT_VADDR)(uintptr_t)s->buf;
	s->lmr = register_va(s->ia, s->pz, s->buf, BUF_LEN, ALL_PRIVS, &s->lmr_context,
			     &s->rmr_context);
}

static void close_side(struct side *s)
{
	CHECK_RET(dat_lmr_free(s->lmr), DAT_SUCCESS);
	CHECK_RET(dat_evd_free(s->dto_evd), DAT_SUCCESS);
	CHECK_RET(dat_evd_free(s->cr_evd), DAT_SUCCESS);
	CHECK_RET(dat_evd_free(s->conn_evd), DAT_SUCCESS);
	CHECK_RET(dat_pz_free(s->pz), DAT_SUCCESS);
	CHECK_RET(dat_ia_close(s->ia, DAT_CLOSE_GRACEFUL_FLAG), DAT_SUCCESS);
	free(s->buf);
}

#define WAIT(evd, want) wait_event_at((evd), (want), WAIT_US, __LINE__)

/* a's SRQ counts: dat_srq_query's available_dto_count and outstanding_dto_count. */
static void counts(DAT_SRQ_HANDLE srq, DAT_COUNT available, DAT_COUNT outstanding, int line)
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
static void async_now(struct side *a, DAT_EVENT_NUMBER number, DAT_HANDLE handle,
		      DAT_COUNT reason, int line)
{
	DAT_EVENT ev;
	memset(&ev, 0, sizeof(ev));
	DAT_RETURN ret = dat_evd_dequeue(a->async_evd, &ev);
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
		CHECK_RET(dat_evd_dequeue((a)->async_evd, &none_), DAT_QUEUE_EMPTY);     \
	} while (0)

/* dat_ia_query: the SRQ limits and support, and DAT_IB_TRANSPORT_MTU. */
static void check_attributes(struct side *a)
{
	DAT_IA_ATTR ia;
	DAT_PROVIDER_ATTR pr;
	CHECK_RET(dat_ia_query(a->ia, NULL, DAT_IA_FIELD_ALL, &ia, DAT_PROVIDER_FIELD_ALL, &pr),
		  DAT_SUCCESS);
	CHECK(ia.max_srqs == 4096 && ia.max_ep_per_srq == ia.max_eps && ia.max_eps > 0);
	CHECK(ia.max_recv_per_srq == 4096);
	CHECK(pr.srq_supported == DAT_TRUE && pr.srq_watermarks_supported == DAT_TRUE);
	CHECK(pr.srq_ep_pz_difference_supported == DAT_FALSE && pr.srq_info_supported == DAT_TRUE);
	CHECK(pr.ep_recv_info_supported == DAT_TRUE); /* dat_ep_recv_query (ep_recv.c) */
	int mtu = 0;
	for (DAT_COUNT i = 0; i < pr.num_provider_specific_attr; i++)
		if (!strcmp(pr.provider_specific_attr[i].name, "DAT_IB_TRANSPORT_MTU"))
			mtu = atoi(pr.provider_specific_attr[i].value);
	CHECK(mtu == 2048);
}

/* dat_srq_create's and dat_srq_query's arguments, a fresh SRQ's parameters, dat_srq_free. */
static void check_create(struct side *a)
{
	DAT_SRQ_HANDLE srq = DAT_HANDLE_NULL;
	DAT_SRQ_ATTR attr = {.max_recv_dtos = 4, .max_recv_iov = 2, .low_watermark = 0};
	const DAT_RETURN arg3 = ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
	CHECK_RET(dat_srq_create(a->ia, a->pz, NULL, &srq), arg3);
	CHECK_RET(dat_srq_create(a->ia, a->pz, &attr, NULL),
		  ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4));
	CHECK_RET(dat_srq_create(a->ia, a->dto_evd, &attr, &srq),
		  ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_PZ));
	attr.max_recv_dtos = 0;
	CHECK_RET(dat_srq_create(a->ia, a->pz, &attr, &srq), arg3);
	attr.max_recv_dtos = 4, attr.max_recv_iov = 0;
	CHECK_RET(dat_srq_create(a->ia, a->pz, &attr, &srq), arg3);
	attr.max_recv_iov = 2, attr.low_watermark = 5;
	CHECK_RET(dat_srq_create(a->ia, a->pz, &attr, &srq), arg3);
	attr.low_watermark = -1;
	CHECK_RET(dat_srq_create(a->ia, a->pz, &attr, &srq), arg3);
	attr.low_watermark = 0, attr.max_recv_dtos = 4097;
	CHECK_RET(dat_srq_create(a->ia, a->pz, &attr, &srq),
		  ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_SRQ));
	attr.max_recv_dtos = 4, attr.max_recv_iov = 17; /* the daemon's answer: past MAX_IOV */
	CHECK_RET(dat_srq_create(a->ia, a->pz, &attr, &srq), arg3);

	attr = (DAT_SRQ_ATTR){.max_recv_dtos = 4096, .max_recv_iov = 16, .low_watermark = 7};
	CHECK_RET(dat_srq_create(a->ia, a->pz, &attr, &srq), DAT_SUCCESS);
	DAT_HANDLE_TYPE type;
	CHECK_RET(dat_get_handle_type(srq, &type), DAT_SUCCESS);
	CHECK(type == DAT_HANDLE_TYPE_SRQ);
	DAT_SRQ_PARAM p;
	memset(&p, 0xff, sizeof(p));
	CHECK_RET(dat_srq_query(srq, DAT_SRQ_FIELD_ALL, &p), DAT_SUCCESS);
	/* (ia_handle is the provider's: libdat2 hands programs its own IA handles) */
	CHECK(p.ia_handle != DAT_HANDLE_NULL && p.srq_state == DAT_SRQ_STATE_OPERATIONAL);
	CHECK(p.pz_handle == a->pz && p.max_recv_dtos == 4096 && p.max_recv_iov == 16);
	CHECK(p.low_watermark == 7 && p.available_dto_count == 0 && p.outstanding_dto_count == 0);
	CHECK_RET(dat_srq_query(srq, 0x100, &p), ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2));
	CHECK_RET(dat_srq_query(srq, DAT_SRQ_FIELD_ALL, NULL), arg3);
	CHECK_RET(dat_srq_free(srq), DAT_SUCCESS);
	CHECK_RET(dat_srq_free(a->pz), ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_SRQ));
}

/* dat_ep_create_with_srq: its errors, the EPs it makes, what they refuse. */
static void check_srq_eps(struct side *a, DAT_SRQ_HANDLE srq)
{
	DAT_EP_HANDLE ep = DAT_HANDLE_NULL;
	DAT_PZ_HANDLE other;
	CHECK_RET(dat_pz_create(a->ia, &other), DAT_SUCCESS);
	CHECK_RET(dat_ep_create_with_srq(a->ia, a->pz, a->dto_evd, a->dto_evd, a->conn_evd, a->pz,
					 NULL, &ep),
		  ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_SRQ));
	CHECK_RET(dat_ep_create_with_srq(a->ia, a->pz, a->dto_evd, a->dto_evd, a->conn_evd, srq,
					 NULL, NULL),
		  ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG8));
	/* the daemon's answer: an EP of an SRQ is in the SRQ's PZ */
	CHECK_RET(dat_ep_create_with_srq(a->ia, other, a->dto_evd, a->dto_evd, a->conn_evd, srq,
					 NULL, &ep),
		  ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG6));
	CHECK_RET(dat_pz_free(other), DAT_SUCCESS);
	for (int i = 0; i < 2; i++)
		CHECK_RET(dat_ep_create_with_srq(a->ia, a->pz, a->dto_evd, a->dto_evd, a->conn_evd,
						 srq, NULL, &a->ep[i]),
			  DAT_SUCCESS);
	DAT_EP_PARAM p;
	CHECK_RET(dat_ep_query(a->ep[1], DAT_EP_FIELD_ALL, &p), DAT_SUCCESS);
	CHECK(p.srq_handle == srq && p.pz_handle == a->pz && p.recv_evd_handle == a->dto_evd);
	CHECK(p.ep_state == DAT_EP_STATE_UNCONNECTED);
	CHECK_RET(dat_ep_create(a->ia, a->pz, a->dto_evd, a->dto_evd, a->conn_evd, NULL, &ep),
		  DAT_SUCCESS);
	CHECK_RET(dat_ep_query(ep, DAT_EP_FIELD_ALL, &p), DAT_SUCCESS);
	CHECK(p.srq_handle == DAT_HANDLE_NULL);
	CHECK_RET(dat_ep_free(ep), DAT_SUCCESS);
	/* its receives are the SRQ's */
	DAT_LMR_TRIPLET iov = {a->address, SLOT, a->lmr_context};
	DAT_DTO_COOKIE c = {.as_64 = 1};
	CHECK_RET(dat_ep_post_recv(a->ep[0], 1, &iov, c, DEFAULT), ERR(DAT_INVALID_STATE, 0));
	CHECK_RET(dat_srq_free(srq), ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_SRQ_IN_USE));
}

/* What dat_srq_post_recv refuses (nothing is posted), as dat_ep_post_recv would. */
static void check_post_errors(struct side *a, DAT_SRQ_HANDLE srq)
{
	static char elsewhere[256];
	DAT_LMR_TRIPLET iov[3] = {{a->address, 8, a->lmr_context},
				  {a->address + 8, 8, a->lmr_context},
				  {a->address + 16, 8, a->lmr_context}};
	DAT_DTO_COOKIE c = {.as_64 = 1};
	const DAT_RETURN arg2 = ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	CHECK_RET(dat_srq_post_recv(srq, -1, iov, c), arg2);
	CHECK_RET(dat_srq_post_recv(srq, 3, iov, c), arg2); /* max_recv_iov is 2 */
	CHECK_RET(dat_srq_post_recv(srq, 1, NULL, c), ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3));
	iov[0].lmr_context ^= 0x5a5a;
	CHECK_RET(dat_srq_post_recv(srq, 1, iov, c), ERR(DAT_PRIVILEGES_VIOLATION, 0));
	iov[0].lmr_context = a->lmr_context;
	iov[0].virtual_address = a->address + BUF_LEN - 4;
	CHECK_RET(dat_srq_post_recv(srq, 1, iov, c), ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3));

	DAT_LMR_CONTEXT lctx;
	DAT_RMR_CONTEXT rctx;
	DAT_LMR_HANDLE read_only = register_va(a->ia, a->pz, elsewhere, sizeof(elsewhere),
					       DAT_MEM_PRIV_LOCAL_READ_FLAG, &lctx, &rctx);
	DAT_LMR_TRIPLET ro = {(DAT_VADDR)(uintptr_t)elsewhere, 8, lctx};
	CHECK_RET(dat_srq_post_recv(srq, 1, &ro, c), ERR(DAT_PRIVILEGES_VIOLATION, 0));
	CHECK_RET(dat_lmr_free(read_only), DAT_SUCCESS);
	DAT_PZ_HANDLE other;
	CHECK_RET(dat_pz_create(a->ia, &other), DAT_SUCCESS);
	DAT_LMR_HANDLE foreign = register_va(a->ia, other, elsewhere, sizeof(elsewhere), ALL_PRIVS,
					     &lctx, &rctx);
	ro.lmr_context = lctx;
	CHECK_RET(dat_srq_post_recv(srq, 1, &ro, c), ERR(DAT_PROTECTION_VIOLATION, 0));
	CHECK_RET(dat_lmr_free(foreign), DAT_SUCCESS);
	CHECK_RET(dat_pz_free(other), DAT_SUCCESS);
	CHECK_RET(dat_srq_post_recv(a->pz, 1, iov, c),
		  ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_SRQ));
	COUNTS(srq, 0, 0);
}

/* b's EP k connects to a's PSP (CONN_QUAL); a accepts with its EP k; both see ESTABLISHED. */
static void connect_pair(struct side *a, struct side *b, int k)
{
	DAT_IA_ATTR attr;
	CHECK_RET(dat_ia_query(a->ia, NULL, DAT_IA_FIELD_ALL, &attr, 0, NULL), DAT_SUCCESS);
	CHECK_RET(dat_ep_connect(b->ep[k], attr.ia_address_ptr, CONN_QUAL, WAIT_US, 0, NULL,
				 DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG),
		  DAT_SUCCESS);
	DAT_EVENT ev = WAIT(a->cr_evd, DAT_CONNECTION_REQUEST_EVENT);
	CHECK_RET(dat_cr_accept(ev.event_data.cr_arrival_event_data.cr_handle, a->ep[k], 0, NULL),
		  DAT_SUCCESS);
	WAIT(b->conn_evd, DAT_CONNECTION_EVENT_ESTABLISHED);
	WAIT(a->conn_evd, DAT_CONNECTION_EVENT_ESTABLISHED);
}

/* Post receive i to the SRQ: two segments of half a slot each when i is even. */
static DAT_RETURN post_receive(struct side *a, DAT_SRQ_HANDLE srq, int i)
{
	DAT_VADDR at = a->address + (DAT_VADDR)i * SLOT;
	DAT_LMR_TRIPLET iov[2] = {{at, SLOT / 2, a->lmr_context},
				  {at + SLOT / 2, SLOT / 2, a->lmr_context}};
	if (i % 2)
		iov[0].segment_length = SLOT;
	DAT_DTO_COOKIE c = {.as_64 = COOKIE(i)};
	return dat_srq_post_recv(srq, i % 2 ? 1 : 2, iov, c);
}

/* b sends message ``m`` (MSG_LEN bytes naming it) on its EP k; its completion is waited. */
static void send_message(struct side *b, int k, int m)
{
	char *text = b->buf + m * SLOT;
	snprintf(text, MSG_LEN, "message %03d", m);
	DAT_LMR_TRIPLET iov = {b->address + (DAT_VADDR)m * SLOT, MSG_LEN, b->lmr_context};
	DAT_DTO_COOKIE c = {.as_64 = 0x200u + (uint64_t)m};
	CHECK_RET(dat_ep_post_send(b->ep[k], 1, &iov, c, DEFAULT), DAT_SUCCESS);
}

static void sent(struct side *b, int m, int line)
{
	DAT_EVENT ev = wait_event_at(b->dto_evd, DAT_DTO_COMPLETION_EVENT, WAIT_US, line);
	const DAT_DTO_COMPLETION_EVENT_DATA *d = &ev.event_data.dto_completion_event_data;
	if (d->status != DAT_DTO_SUCCESS || d->user_cookie.as_64 != 0x200u + (uint64_t)m) {
		printf("FAILED line %d: send status %d, cookie 0x%llx\n", line, (int)d->status,
		       (unsigned long long)d->user_cookie.as_64);
		failures++;
	}
}

/* a's next receive completion: receive i, on a's EP k, holding message m. */
static void received(struct side *a, int i, int k, int m, int line)
{
	DAT_EVENT ev = wait_event_at(a->dto_evd, DAT_DTO_COMPLETION_EVENT, WAIT_US, line);
	const DAT_DTO_COMPLETION_EVENT_DATA *d = &ev.event_data.dto_completion_event_data;
	char want[MSG_LEN];
	snprintf(want, sizeof(want), "message %03d", m);
	if (d->status != DAT_DTO_SUCCESS || d->user_cookie.as_64 != COOKIE(i) ||
	    d->ep_handle != a->ep[k] || d->operation != DAT_DTO_RECEIVE ||
	    d->transfered_length != MSG_LEN || strcmp(a->buf + i * SLOT, want)) {
		printf("FAILED line %d: receive status %d, cookie 0x%llx, ep %p (%p), op %d, length "
		       "%llu, '%.16s'; not receive %d, message %d\n", line, (int)d->status,
		       (unsigned long long)d->user_cookie.as_64, d->ep_handle, a->ep[k],
		       (int)d->operation, (unsigned long long)d->transfered_length,
		       a->buf + i * SLOT, i, m);
		failures++;
	}
}
/* message m from b's EP k lands in a's receive i on a's EP k */
#define DELIVER(a, b, k, i, m)                        \
	do {                                          \
		send_message((b), (k), (m));          \
		received((a), (i), (k), (m), __LINE__); \
		sent((b), (m), __LINE__);             \
	} while (0)

/* Wait until the SRQ's available count is ``n`` (the daemon completed a receive whose event
 * the program has not taken). */
static void await_available(DAT_SRQ_HANDLE srq, DAT_COUNT n)
{
	DAT_SRQ_PARAM p = {.available_dto_count = -1};
	time_t give_up = time(NULL) + WAIT_US / 1000000;
	while (time(NULL) < give_up &&
	       dat_srq_query(srq, DAT_SRQ_FIELD_ALL, &p) == DAT_SUCCESS &&
	       p.available_dto_count != n)
		nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
	CHECK(p.available_dto_count == n);
}

/* Receives taken in posting order by whichever EP a message arrives on; the SRQ full; its
 * resize rules; a receive occupies it until its completion is handed out. */
static void check_order(struct side *a, struct side *b, DAT_SRQ_HANDLE srq)
{
	for (int i = 0; i < DEPTH; i++)
		CHECK_RET(post_receive(a, srq, i), DAT_SUCCESS);
	CHECK_RET(post_receive(a, srq, DEPTH), ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_SRQ));
	COUNTS(srq, DEPTH, DEPTH);
	CHECK_RET(dat_srq_resize(srq, 0), ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2));
	CHECK_RET(dat_srq_resize(srq, 4097), ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_SRQ));
	CHECK_RET(dat_srq_resize(srq, DEPTH - 1), ERR(DAT_INVALID_STATE, 0)); /* 8 outstanding */
	CHECK_RET(dat_srq_resize(srq, 2 * DEPTH), DAT_SUCCESS);
	DAT_SRQ_PARAM p;
	CHECK_RET(dat_srq_query(srq, DAT_SRQ_FIELD_MAX_RECV_DTO, &p), DAT_SUCCESS);
	CHECK(p.max_recv_dtos == 2 * DEPTH);
	CHECK_RET(dat_srq_resize(srq, DEPTH), DAT_SUCCESS);

	/* messages 0-5 alternate between the EPs, and take receives 0-5 in turn */
	for (int m = 0; m < 6; m++)
		DELIVER(a, b, m % 2, m, m);
	COUNTS(srq, 2, 2);
	/* message 6: completed (available 1) but not handed out, it still occupies the SRQ */
	send_message(b, 1, 6);
	sent(b, 6, __LINE__);
	await_available(srq, 1);
	COUNTS(srq, 1, 2);
	received(a, 6, 1, 6, __LINE__);
	COUNTS(srq, 1, 1);
}

/* The low watermark event: once per dat_srq_set_lw, during the call when the SRQ already holds
 * fewer receives, else when a message takes it below. */
static void check_watermark(struct side *a, struct side *b, DAT_SRQ_HANDLE srq)
{
	const DAT_RETURN arg2 = ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	CHECK_RET(dat_srq_set_lw(srq, -1), arg2);
	CHECK_RET(dat_srq_set_lw(srq, DEPTH + 1), arg2);
	NO_ASYNC(a);
	CHECK_RET(dat_srq_set_lw(srq, 3), DAT_SUCCESS); /* 1 receive left: at once */
	LOW_EVENT(a, srq);
	NO_ASYNC(a);
	DAT_SRQ_PARAM p;
	CHECK_RET(dat_srq_query(srq, DAT_SRQ_FIELD_LOW_WATERMARK, &p), DAT_SUCCESS);
	CHECK(p.low_watermark == 3);
	CHECK_RET(dat_srq_resize(srq, 2), ERR(DAT_INVALID_STATE, 0)); /* below the watermark */

	for (int i = 8; i < 13; i++)
		CHECK_RET(post_receive(a, srq, i), DAT_SUCCESS);
	COUNTS(srq, 6, 6);
	CHECK_RET(dat_srq_set_lw(srq, 5), DAT_SUCCESS); /* 6 left: armed */
	NO_ASYNC(a);
	DELIVER(a, b, 0, 7, 7); /* 5 left */
	NO_ASYNC(a);
	DELIVER(a, b, 1, 8, 8); /* 4 left: below */
	LOW_EVENT(a, srq);
	DELIVER(a, b, 0, 9, 9); /* 3 left: the event was once */
	NO_ASYNC(a);
	COUNTS(srq, 3, 3);
}

/* A Write with immediate data takes an SRQ receive too (DAT_IB_DTO_RECV_IMMED), and frees it
 * once handed out. */
static void check_write_immed(struct side *a, struct side *b, DAT_SRQ_HANDLE srq)
{
	DAT_LMR_TRIPLET src = {b->address, 100, b->lmr_context};
	DAT_RMR_TRIPLET dst = {a->address + 32768, 100, a->rmr_context};
	DAT_DTO_COOKIE c = {.as_64 = 0x300};
	memset(b->buf, 0x42, 100);
	CHECK_RET(dat_ib_post_rdma_write_immed(b->ep[1], 1, &src, c, &dst, 0xabcd, DEFAULT),
		  DAT_SUCCESS);
	DAT_EVENT ev = WAIT(a->dto_evd, (DAT_EVENT_NUMBER)DAT_IB_DTO_EVENT);
	const DAT_DTO_COMPLETION_EVENT_DATA *d = &ev.event_data.dto_completion_event_data;
	DAT_IB_EXTENSION_EVENT_DATA x;
	memcpy(&x, ev.event_extension_data, sizeof(x));
	CHECK(d->status == DAT_DTO_SUCCESS && d->user_cookie.as_64 == COOKIE(10));
	CHECK((int)d->operation == (int)DAT_IB_DTO_RECV_IMMED && d->ep_handle == a->ep[1]);
	CHECK(x.type == DAT_IB_RDMA_WRITE_IMMED_DATA && x.val.immed.data == 0xabcd);
	CHECK(a->buf[32768] == 0x42 && a->buf[32768 + 99] == 0x42);
	WAIT(b->dto_evd, (DAT_EVENT_NUMBER)DAT_IB_DTO_EVENT);
	COUNTS(srq, 2, 2);
}

/* With no receive in the SRQ, a Send waits until one is posted. */
static void check_receiver_not_ready(struct side *a, struct side *b, DAT_SRQ_HANDLE srq)
{
	DELIVER(a, b, 0, 11, 11);
	DELIVER(a, b, 1, 12, 12);
	COUNTS(srq, 0, 0);
	send_message(b, 1, 13);
	DAT_EVENT ev;
	DAT_COUNT nmore;
	CHECK_RET(dat_evd_wait(a->dto_evd, QUIET_US, 1, &ev, &nmore),
		  ERR(DAT_TIMEOUT_EXPIRED, 0));
	CHECK_RET(post_receive(a, srq, 13), DAT_SUCCESS);
	received(a, 13, 1, 13, __LINE__);
	sent(b, 13, __LINE__);
	COUNTS(srq, 0, 0);
}

/* b disconnects: each of a's EPs leaves the SRQ, and says so on the async EVD (EP_BROKEN
 * with the EP's handle); the SRQ is freed once its EPs are. */
static void check_detach(struct side *a, struct side *b, DAT_SRQ_HANDLE srq)
{
	for (int k = 0; k < 2; k++) {
		CHECK_RET(dat_ep_disconnect(b->ep[k], DAT_CLOSE_GRACEFUL_FLAG), DAT_SUCCESS);
		WAIT(b->conn_evd, DAT_CONNECTION_EVENT_DISCONNECTED);
		WAIT(a->conn_evd, DAT_CONNECTION_EVENT_DISCONNECTED);
		DAT_EVENT ev = WAIT(a->async_evd, DAT_ASYNC_ERROR_EP_BROKEN);
		CHECK(ev.event_data.asynch_error_event_data.dat_handle == a->ep[k]);
		CHECK(ev.event_data.asynch_error_event_data.reason == DAT_EP_TRANSFER_TO_ERROR);
	}
	CHECK_RET(dat_srq_free(srq), ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_SRQ_IN_USE));
	CHECK_RET(dat_ep_free(a->ep[0]), DAT_SUCCESS);
	CHECK_RET(dat_srq_free(srq), ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_SRQ_IN_USE));
	CHECK_RET(dat_ep_free(a->ep[1]), DAT_SUCCESS);
	CHECK_RET(dat_srq_free(srq), DAT_SUCCESS);
	for (int k = 0; k < 2; k++)
		CHECK_RET(dat_ep_free(b->ep[k]), DAT_SUCCESS);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s IA_NAME\n", argv[0]);
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	struct side a, b;
	open_side(&a, argv[1]);
	open_side(&b, argv[1]);
	check_attributes(&a);
	check_create(&a);
	DAT_SRQ_HANDLE srq = DAT_HANDLE_NULL;
	DAT_SRQ_ATTR attr = {.max_recv_dtos = DEPTH, .max_recv_iov = 2, .low_watermark = 0};
	CHECK_RET(dat_srq_create(a.ia, a.pz, &attr, &srq), DAT_SUCCESS);
	check_srq_eps(&a, srq);
	check_post_errors(&a, srq);
	for (int k = 0; k < 2; k++)
		CHECK_RET(dat_ep_create(b.ia, b.pz, b.dto_evd, b.dto_evd, b.conn_evd, NULL, &b.ep[k]),
			  DAT_SUCCESS);
	if (failures) {
		printf("FAILED\n");
		return 1;
	}
	DAT_PSP_HANDLE psp;
	CHECK_RET(dat_psp_create(a.ia, CONN_QUAL, a.cr_evd, DAT_PSP_CONSUMER_FLAG, &psp),
		  DAT_SUCCESS);
	connect_pair(&a, &b, 0);
	connect_pair(&a, &b, 1);
	CHECK_RET(dat_psp_free(psp), DAT_SUCCESS);
	if (!failures)
		check_order(&a, &b, srq);
	if (!failures)
		check_watermark(&a, &b, srq);
	if (!failures)
		check_write_immed(&a, &b, srq);
	if (!failures)
		check_receiver_not_ready(&a, &b, srq);
	if (failures) {
		printf("FAILED\n");
		return 1;
	}
	check_detach(&a, &b, srq);
	close_side(&a);
	close_side(&b);
	printf(failures ? "FAILED\n" : "PASSED\n");
	return failures ? 1 : 0;
}
