/* Shared receive queues through libdat2, between two IAs of one program connected over the
 * fabric: the receives of one SRQ taken in posting order by the two EPs that share it (a Write
 * with immediate data too), a Send waiting for a receive until one is posted, the low
 * watermark event once per dat_srq_set_lw, an EP leaving the SRQ, a completion reaped after
 * its EP was freed (srq_errors.c: the attributes and every call's argument errors).
 *
 * usage: srq_basic IA_NAME
 * Side a (the receiver) has an SRQ and two EPs created with it; side b sends on two plain EPs,
 * each connected to one of them. Prints "PASSED" and exits 0 when every check holds; each
 * failed check prints its line. */
#define _GNU_SOURCE
#include "srq_side.h"

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
	DAT_EVENT ev = wait_event_at(b->b.dto_evd, DAT_DTO_COMPLETION_EVENT, WAIT_US, line);
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
	DAT_EVENT ev = wait_event_at(a->b.dto_evd, DAT_DTO_COMPLETION_EVENT, WAIT_US, line);
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
	DAT_EVENT ev = WAIT(a->b.dto_evd, (DAT_EVENT_NUMBER)DAT_IB_DTO_EVENT);
	const DAT_DTO_COMPLETION_EVENT_DATA *d = &ev.event_data.dto_completion_event_data;
	DAT_IB_EXTENSION_EVENT_DATA x;
	memcpy(&x, ev.event_extension_data, sizeof(x));
	CHECK(d->status == DAT_DTO_SUCCESS && d->user_cookie.as_64 == COOKIE(10));
	CHECK((int)d->operation == (int)DAT_IB_DTO_RECV_IMMED && d->ep_handle == a->ep[1]);
	CHECK(x.type == DAT_IB_RDMA_WRITE_IMMED_DATA && x.val.immed.data == 0xabcd);
	CHECK(a->buf[32768] == 0x42 && a->buf[32768 + 99] == 0x42);
	WAIT(b->b.dto_evd, (DAT_EVENT_NUMBER)DAT_IB_DTO_EVENT);
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
	CHECK_RET(dat_evd_wait(a->b.dto_evd, QUIET_US, 1, &ev, &nmore),
		  ERR(DAT_TIMEOUT_EXPIRED, 0));
	CHECK_RET(post_receive(a, srq, 13), DAT_SUCCESS);
	received(a, 13, 1, 13, __LINE__);
	sent(b, 13, __LINE__);
	COUNTS(srq, 0, 0);
}

/* b disconnects: each of a's EPs leaves the SRQ, and says so on the async EVD (EP_BROKEN
 * with the EP's handle); a receive completion taken after its EP was freed still frees the
 * SRQ; the SRQ is freed once its EPs are. */
static void check_detach(struct side *a, struct side *b, DAT_SRQ_HANDLE srq)
{
	CHECK_RET(post_receive(a, srq, 14), DAT_SUCCESS);
	send_message(b, 0, 14);
	sent(b, 14, __LINE__);
	await_available(srq, 0);
	COUNTS(srq, 0, 1); /* completed, its event not handed out */
	for (int k = 0; k < 2; k++) {
		CHECK_RET(dat_ep_disconnect(b->ep[k], DAT_CLOSE_GRACEFUL_FLAG), DAT_SUCCESS);
		WAIT(b->b.conn_evd, DAT_CONNECTION_EVENT_DISCONNECTED);
		WAIT(a->b.conn_evd, DAT_CONNECTION_EVENT_DISCONNECTED);
		DAT_EVENT ev = WAIT(a->b.async_evd, DAT_ASYNC_ERROR_EP_BROKEN);
		CHECK(ev.event_data.asynch_error_event_data.dat_handle == a->ep[k]);
		CHECK(ev.event_data.asynch_error_event_data.reason == DAT_EP_TRANSFER_TO_ERROR);
	}
	CHECK_RET(dat_srq_free(srq), ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_SRQ_IN_USE));
	CHECK_RET(dat_ep_free(a->ep[0]), DAT_SUCCESS);
	DAT_EVENT ev = WAIT(a->b.dto_evd, DAT_DTO_COMPLETION_EVENT);
	const DAT_DTO_COMPLETION_EVENT_DATA *d = &ev.event_data.dto_completion_event_data;
	CHECK(d->user_cookie.as_64 == COOKIE(14) && d->operation == DAT_DTO_RECEIVE);
	COUNTS(srq, 0, 0);
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
	DAT_SRQ_HANDLE srq = DAT_HANDLE_NULL;
	DAT_SRQ_ATTR attr = {.max_recv_dtos = DEPTH, .max_recv_iov = 2, .low_watermark = 0};
	CHECK_RET(dat_srq_create(a.b.ia, a.b.pz, &attr, &srq), DAT_SUCCESS);
	for (int k = 0; k < 2; k++) {
		CHECK_RET(dat_ep_create_with_srq(a.b.ia, a.b.pz, a.b.dto_evd, a.b.dto_evd,
						 a.b.conn_evd, srq, NULL, &a.ep[k]),
			  DAT_SUCCESS);
		CHECK_RET(dat_ep_create(b.b.ia, b.b.pz, b.b.dto_evd, b.b.dto_evd, b.b.conn_evd, NULL,
					&b.ep[k]),
			  DAT_SUCCESS);
	}
	if (failures) {
		printf("FAILED\n");
		return 1;
	}
	for (int k = 0; k < 2; k++)
		accept_connection(&a.b, a.ep[k], &b.b, b.ep[k], CONN_QUAL);
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
