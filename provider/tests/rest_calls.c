/* The rest of DAT 2.0 (all but SRQ) through libdat2, between two IAs of one program: the EVD
 * calls (query, enable/disable against a CNO, (un)waitable, modify_cno, resize), the EP's
 * receive query and watermarks, dat_ep_dup_connect, dat_cr_handoff, dat_rmr_create_for_ep (an
 * RMR whose key works only through the EP it is bound on), the provider attributes that
 * advertise them, and the calls the provider declines (DAT_MODEL_NOT_SUPPORTED). Debian's
 * libdat2 exports no function for rmr_create_for_ep and the declined 2.0 calls: those are
 * called through the provider's table, as dat_redirection.h's macros do.
 *
 * usage: rest_calls PASSIVE_IA ACTIVE_IA
 * Prints "PASSED" and exits 0 when every check holds; each failed check prints its line. */
#define _GNU_SOURCE
#include "cm_side.h"

#include <dat2/dat_registry.h> /* DAT_PROVIDER, its table of entry points */

#define RW (DAT_MEM_PRIV_REMOTE_READ_FLAG | DAT_MEM_PRIV_REMOTE_WRITE_FLAG)
#define Q (QUAL + 40) /* conn_quals Q, Q + 1, ... */
#define SHORT_US 50000

static DAT_PROVIDER *provider(void *handle)
{
	return DAT_HANDLE_TO_PROVIDER(handle);
}

/* The provider's own IA handle (libdat2 hands programs its own): what dat_evd_query gives. */
static DAT_IA_HANDLE provider_ia(DAT_EVD_HANDLE evd)
{
	DAT_EVD_PARAM p;
	CHECK_RET(dat_evd_query(evd, DAT_EVD_FIELD_ALL, &p), DAT_SUCCESS);
	return p.ia_handle;
}

/* dat_evd_query's state, dat_evd_enable/disable (a disabled EVD wakes no CNO waiter),
 * dat_evd_set/clear_unwaitable and dat_evd_modify_cno. */
static void check_evd_state(struct side *s)
{
	DAT_CNO_HANDLE c1, c2;
	DAT_EVD_HANDLE evd, got = NULL;
	DAT_EVENT ev = software_event(&got), out;
	DAT_COUNT nmore;
	DAT_EVD_PARAM p;
	CHECK_RET(dat_cno_create(s->ia, DAT_OS_WAIT_PROXY_AGENT_NULL, &c1), DAT_SUCCESS);
	CHECK_RET(dat_cno_create(s->ia, DAT_OS_WAIT_PROXY_AGENT_NULL, &c2), DAT_SUCCESS);
	CHECK_RET(dat_evd_create(s->ia, 4, c1, DAT_EVD_SOFTWARE_FLAG, &evd), DAT_SUCCESS);
	CHECK_RET(dat_evd_query(evd, DAT_EVD_FIELD_ALL, &p), DAT_SUCCESS);
	CHECK(p.evd_state == (DAT_EVD_STATE_ENABLED | DAT_EVD_STATE_WAITABLE) && p.cno_handle == c1);
	CHECK_RET(dat_cno_free(c1), ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_CNO_IN_USE));
	CHECK_RET(dat_evd_modify_cno(evd, c2), DAT_SUCCESS);
	CHECK_RET(dat_cno_free(c1), DAT_SUCCESS); /* nothing attached any more */
	CHECK_RET(dat_evd_disable(evd), DAT_SUCCESS);
	CHECK_RET(dat_evd_post_se(evd, &ev), DAT_SUCCESS);
	CHECK_RET(dat_cno_wait(c2, SHORT_US, &got), ERR(DAT_TIMEOUT_EXPIRED, 0));
	CHECK_RET(dat_evd_enable(evd), DAT_SUCCESS);
	CHECK_RET(dat_cno_wait(c2, WAIT_US, &got), DAT_SUCCESS);
	CHECK(got == evd);
	CHECK_RET(dat_evd_set_unwaitable(evd), DAT_SUCCESS);
	CHECK_RET(dat_evd_query(evd, DAT_EVD_FIELD_ALL, &p), DAT_SUCCESS);
	CHECK(p.evd_state == (DAT_EVD_STATE_ENABLED | DAT_EVD_STATE_UNWAITABLE) && p.cno_handle == c2);
	CHECK_RET(dat_evd_wait(evd, SHORT_US, 1, &out, &nmore),
		  ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_UNWAITABLE));
	CHECK_RET(dat_evd_clear_unwaitable(evd), DAT_SUCCESS);
	CHECK_RET(dat_evd_wait(evd, WAIT_US, 1, &out, &nmore), DAT_SUCCESS);
	CHECK(out.event_data.software_event_data.pointer == &got);
	CHECK_RET(dat_evd_modify_cno(evd, DAT_HANDLE_NULL), DAT_SUCCESS);
	CHECK_RET(dat_evd_query(evd, DAT_EVD_FIELD_ALL, &p), DAT_SUCCESS);
	CHECK(p.cno_handle == DAT_HANDLE_NULL);
	CHECK_RET(dat_evd_modify_cno(evd, s->pz), ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_CNO));
	CHECK_RET(dat_evd_modify_cno(s->pz, c2),
		  ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_REQUEST));
	CHECK_RET(dat_cno_free(c2), DAT_SUCCESS);
	CHECK_RET(dat_evd_free(evd), DAT_SUCCESS);
}

/* dat_evd_resize: below the events queued it is DAT_INVALID_STATE; the new length is what the
 * daemon holds the EVD to; grown past its ring (2 slots), the queue moves to a new ring and
 * every event comes out in order. */
static void check_resize(struct side *s)
{
	static int marks[300];
	DAT_EVD_HANDLE evd;
	DAT_EVENT ev, out;
	DAT_COUNT nmore;
	DAT_EVD_PARAM p;
	CHECK_RET(dat_evd_create(s->ia, 2, DAT_HANDLE_NULL, DAT_EVD_SOFTWARE_FLAG, &evd),
		  DAT_SUCCESS);
	for (int i = 0; i < 2; i++) {
		ev = software_event(&marks[i]);
		CHECK_RET(dat_evd_post_se(evd, &ev), DAT_SUCCESS);
	}
	CHECK_RET(dat_evd_dequeue(evd, &out), DAT_SUCCESS); /* the index moves off 0 */
	ev = software_event(&marks[2]);
	CHECK_RET(dat_evd_post_se(evd, &ev), DAT_SUCCESS);
	CHECK_RET(dat_evd_resize(evd, 1), ERR(DAT_INVALID_STATE, 0));
	CHECK_RET(dat_evd_resize(evd, 0), ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2));
	CHECK_RET(dat_evd_resize(s->pz, 8), ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_REQUEST));
	CHECK_RET(dat_evd_resize(evd, 299), DAT_SUCCESS);
	CHECK_RET(dat_evd_query(evd, DAT_EVD_FIELD_ALL, &p), DAT_SUCCESS);
	CHECK(p.evd_qlen == 299);
	for (int i = 3; i < 300; i++) {
		ev = software_event(&marks[i]);
		CHECK_RET(dat_evd_post_se(evd, &ev), DAT_SUCCESS);
	}
	CHECK_RET(dat_evd_post_se(evd, &ev), ERR(DAT_QUEUE_FULL, 0));
	for (int i = 1; i < 300; i++) {
		CHECK_RET(dat_evd_wait(evd, WAIT_US, 1, &out, &nmore), DAT_SUCCESS);
		if (out.event_data.software_event_data.pointer != &marks[i]) {
			CHECK(out.event_data.software_event_data.pointer == &marks[i]);
			break;
		}
	}
	CHECK_RET(dat_evd_dequeue(evd, &out), DAT_QUEUE_EMPTY);
	CHECK_RET(dat_evd_resize(evd, 3), DAT_SUCCESS); /* shrinking keeps the ring */
	CHECK_RET(dat_evd_resize(s->async_evd, 64), DAT_SUCCESS);
	CHECK_RET(dat_evd_free(evd), DAT_SUCCESS);
}

/* a's EP accepts b's EP through a PSP on ``qual`` (left listening). */
static void connect_pair(struct side *a, struct side *b, DAT_EP_HANDLE pa, DAT_EP_HANDLE pb,
			 DAT_CONN_QUAL qual)
{
	struct sockaddr_in to = no_port(a);
	CHECK_RET(connect_ep(pb, &to, qual, 0, NULL), DAT_SUCCESS);
	DAT_EVENT ev = WAIT(a->cr_evd, DAT_CONNECTION_REQUEST_EVENT);
	CHECK_RET(dat_cr_accept(ev.event_data.cr_arrival_event_data.cr_handle, pa, 0, NULL),
		  DAT_SUCCESS);
	CONN_EVENT(b, pb, DAT_CONNECTION_EVENT_ESTABLISHED);
	CONN_EVENT(a, pa, DAT_CONNECTION_EVENT_ESTABLISHED);
}

/* An RDMA Write of 8 bytes from ``from`` through ``ep`` to ``addr`` with ``key``: its status. */
static DAT_DTO_COMPLETION_STATUS write_through(struct side *s, DAT_EP_HANDLE ep, struct mem *from,
					       DAT_VADDR addr, DAT_RMR_CONTEXT key)
{
	DAT_LMR_TRIPLET iov = {from->addr, 8, from->lctx};
	DAT_RMR_TRIPLET remote = {addr, 8, key};
	DAT_DTO_COOKIE c = {.as_64 = 7};
	CHECK_RET(dat_ep_post_rdma_write(ep, 1, &iov, c, &remote, DAT_COMPLETION_DEFAULT_FLAG),
		  DAT_SUCCESS);
	DAT_EVENT ev = WAIT(s->dto_evd, DAT_DTO_COMPLETION_EVENT);
	return ev.event_data.dto_completion_event_data.status;
}

/* Two connections (the second by dat_ep_dup_connect), then an RMR of EP scope bound on the
 * first: its key works through the first connection and fails through the second. */
static void check_dup_connect_and_ep_windows(struct side *a, struct side *b)
{
	DAT_EP_HANDLE pa1 = new_ep(a), pa2 = new_ep(a), pb1 = new_ep(b), pb2 = new_ep(b);
	DAT_EP_HANDLE idle = new_ep(a);
	DAT_PSP_HANDLE psp;
	struct mem ma, mb;
	reg(a, &ma);
	reg(b, &mb);
	CHECK_RET(dat_psp_create(a->ia, Q, a->cr_evd, DAT_PSP_CONSUMER_FLAG, &psp), DAT_SUCCESS);
	CHECK_RET(dat_ep_dup_connect(pb2, pb1, WAIT_US, 0, NULL, DAT_QOS_BEST_EFFORT),
		  ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_UNCONNECTED)); /* dup_ep not connected */
	connect_pair(a, b, pa1, pb1, Q);
	CHECK_RET(dat_ep_dup_connect(pb2, pb1, 0, 0, NULL, DAT_QOS_BEST_EFFORT),
		  ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3));
	CHECK_RET(dat_ep_dup_connect(pb2, pb1, WAIT_US, -1, NULL, DAT_QOS_BEST_EFFORT),
		  ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4));
	CHECK_RET(dat_ep_dup_connect(pb2, pb1, WAIT_US, 3, NULL, DAT_QOS_BEST_EFFORT),
		  ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG5));
	CHECK_RET(dat_ep_dup_connect(pb2, pb1, WAIT_US, 0, NULL, DAT_QOS_PREMIUM),
		  ERR(DAT_MODEL_NOT_SUPPORTED, 0));
	CHECK_RET(dat_ep_dup_connect(pb2, a->pz, WAIT_US, 0, NULL, DAT_QOS_BEST_EFFORT),
		  ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP));
	CHECK_RET(dat_ep_dup_connect(pb1, pb1, WAIT_US, 0, NULL, DAT_QOS_BEST_EFFORT),
		  ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_CONNECTED));
	CHECK_RET(dat_ep_dup_connect(idle, pa1, WAIT_US, 0, NULL, DAT_QOS_BEST_EFFORT),
		  ERR(DAT_MODEL_NOT_SUPPORTED, 0)); /* pa1 accepted: no conn_qual to go to */
	char dup[] = "dup";
	CHECK_RET(dat_ep_dup_connect(pb2, pb1, WAIT_US, 3, dup, DAT_QOS_BEST_EFFORT), DAT_SUCCESS);
	STATE(pb2, DAT_EP_STATE_ACTIVE_CONNECTION_PENDING);
	DAT_EVENT ev = WAIT(a->cr_evd, DAT_CONNECTION_REQUEST_EVENT);
	DAT_CR_PARAM cp;
	DAT_CR_HANDLE cr = ev.event_data.cr_arrival_event_data.cr_handle;
	CHECK(ev.event_data.cr_arrival_event_data.conn_qual == Q);
	CHECK_RET(dat_cr_query(cr, DAT_CR_FIELD_ALL, &cp), DAT_SUCCESS);
	CHECK(cp.private_data_size == 3 && !memcmp(cp.private_data, "dup", 3));
	CHECK_RET(dat_cr_accept(cr, pa2, 0, NULL), DAT_SUCCESS);
	CONN_EVENT(b, pb2, DAT_CONNECTION_EVENT_ESTABLISHED);
	CONN_EVENT(a, pa2, DAT_CONNECTION_EVENT_ESTABLISHED);
	DAT_EP_PARAM p1, p2;
	CHECK_RET(dat_ep_query(pb1, DAT_EP_FIELD_ALL, &p1), DAT_SUCCESS);
	CHECK_RET(dat_ep_query(pb2, DAT_EP_FIELD_ALL, &p2), DAT_SUCCESS);
	CHECK(p2.remote_port_qual == Q && !memcmp(p1.remote_ia_address_ptr, p2.remote_ia_address_ptr,
						     sizeof(struct sockaddr_in)));

	DAT_RMR_HANDLE window, plain;
	DAT_RMR_PARAM rp;
	CHECK_RET(provider(a->pz)->rmr_create_for_ep_func(a->pz, &window), DAT_SUCCESS);
	CHECK_RET(provider(a->pz)->rmr_create_for_ep_func(a->pz, NULL),
		  ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2));
	CHECK_RET(provider(a->pz)->rmr_create_for_ep_func(a->conn_evd, &plain),
		  ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_PZ));
	CHECK_RET(dat_rmr_create(a->pz, &plain), DAT_SUCCESS);
	CHECK_RET(dat_rmr_query(window, DAT_RMR_FIELD_ALL, &rp), DAT_SUCCESS);
	CHECK(rp.rmr_scope == DAT_RMR_SCOPE_EP);
	CHECK_RET(dat_rmr_query(plain, DAT_RMR_FIELD_ALL, &rp), DAT_SUCCESS);
	CHECK(rp.rmr_scope == DAT_RMR_SCOPE_PZ);
	DAT_LMR_TRIPLET range = {ma.addr, 64, ma.lctx};
	DAT_RMR_CONTEXT key = 0, plain_key = 0;
	DAT_RMR_COOKIE rc = {.as_64 = 1};
	CHECK_RET(dat_rmr_bind(window, ma.lmr, &range, RW, DAT_VA_TYPE_VA, pa1, rc,
			       DAT_COMPLETION_DEFAULT_FLAG, &key),
		  DAT_SUCCESS);
	WAIT(a->dto_evd, DAT_RMR_BIND_COMPLETION_EVENT);
	CHECK_RET(dat_rmr_bind(plain, ma.lmr, &range, RW, DAT_VA_TYPE_VA, pa1, rc,
			       DAT_COMPLETION_DEFAULT_FLAG, &plain_key),
		  DAT_SUCCESS);
	WAIT(a->dto_evd, DAT_RMR_BIND_COMPLETION_EVENT);
	CHECK(write_through(b, pb1, &mb, ma.addr, key) == DAT_DTO_SUCCESS);
	CHECK(write_through(b, pb2, &mb, ma.addr, plain_key) == DAT_DTO_SUCCESS);
	CHECK(write_through(b, pb2, &mb, ma.addr, key) == DAT_DTO_ERR_REMOTE_ACCESS);
	CONN_EVENT(b, pb2, DAT_CONNECTION_EVENT_BROKEN); /* a remote access error breaks it */
	CONN_EVENT(a, pa2, DAT_CONNECTION_EVENT_BROKEN);

	CHECK_RET(dat_rmr_free(window), DAT_SUCCESS);
	CHECK_RET(dat_rmr_free(plain), DAT_SUCCESS);
	CHECK_RET(dat_ep_disconnect(pb1, DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS);
	CONN_EVENT(b, pb1, DAT_CONNECTION_EVENT_DISCONNECTED);
	CONN_EVENT(a, pa1, DAT_CONNECTION_EVENT_DISCONNECTED);
	CHECK_RET(dat_psp_free(psp), DAT_SUCCESS);
	DAT_EP_HANDLE eps[] = {pa1, pa2, pb1, pb2, idle};
	for (size_t i = 0; i < sizeof(eps) / sizeof(eps[0]); i++)
		CHECK_RET(dat_ep_free(eps[i]), DAT_SUCCESS);
	unreg(&ma);
	unreg(&mb);
}

/* dat_cr_handoff: a request moves from one PSP to another of the IA (a new CR there, the
 * old one is gone), and from a PROVIDER PSP (its EP goes) to an RSP (whose EP takes it). */
static void check_handoff(struct side *a, struct side *b)
{
	DAT_EVD_HANDLE other_evd;
	DAT_PSP_HANDLE p1, p2, p3;
	DAT_RSP_HANDLE rsp;
	DAT_EP_HANDLE pa = new_ep(a), pb = new_ep(b), rsp_ep = new_ep(a), pb2 = new_ep(b);
	CHECK_RET(dat_evd_create(a->ia, 8, DAT_HANDLE_NULL, DAT_EVD_CR_FLAG, &other_evd),
		  DAT_SUCCESS);
	CHECK_RET(dat_psp_create(a->ia, Q + 1, a->cr_evd, DAT_PSP_CONSUMER_FLAG, &p1), DAT_SUCCESS);
	CHECK_RET(dat_psp_create(a->ia, Q + 2, other_evd, DAT_PSP_CONSUMER_FLAG, &p2), DAT_SUCCESS);
	struct sockaddr_in to = no_port(a);
	char who[] = "who";
	CHECK_RET(connect_ep(pb, &to, Q + 1, 3, who), DAT_SUCCESS);
	DAT_EVENT ev = WAIT(a->cr_evd, DAT_CONNECTION_REQUEST_EVENT);
	DAT_CR_HANDLE cr = ev.event_data.cr_arrival_event_data.cr_handle;
	CHECK_RET(dat_cr_handoff(cr, NOBODY), ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2));
	CHECK_RET(dat_cr_handoff(cr, Q + 1), ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2));
	CHECK_RET(dat_cr_handoff(a->pz, Q + 2), ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_CR));
	CHECK_RET(dat_cr_handoff(cr, Q + 2), DAT_SUCCESS);
	ev = WAIT(other_evd, DAT_CONNECTION_REQUEST_EVENT);
	CHECK(ev.event_data.cr_arrival_event_data.sp_handle.psp_handle == p2);
	CHECK(ev.event_data.cr_arrival_event_data.conn_qual == Q + 2);
	cr = ev.event_data.cr_arrival_event_data.cr_handle;
	DAT_CR_PARAM cp;
	CHECK_RET(dat_cr_query(cr, DAT_CR_FIELD_ALL, &cp), DAT_SUCCESS);
	CHECK(cp.private_data_size == 3 && !memcmp(cp.private_data, "who", 3));
	CHECK_RET(dat_cr_accept(cr, pa, 0, NULL), DAT_SUCCESS);
	CONN_EVENT(b, pb, DAT_CONNECTION_EVENT_ESTABLISHED);
	CONN_EVENT(a, pa, DAT_CONNECTION_EVENT_ESTABLISHED);

	CHECK_RET(dat_psp_create(a->ia, Q + 3, a->cr_evd, DAT_PSP_PROVIDER_FLAG, &p3), DAT_SUCCESS);
	CHECK_RET(dat_rsp_create(a->ia, Q + 4, rsp_ep, other_evd, &rsp), DAT_SUCCESS);
	CHECK_RET(connect_ep(pb2, &to, Q + 3, 0, NULL), DAT_SUCCESS);
	ev = WAIT(a->cr_evd, DAT_CONNECTION_REQUEST_EVENT);
	cr = ev.event_data.cr_arrival_event_data.cr_handle;
	CHECK_RET(dat_cr_query(cr, DAT_CR_FIELD_ALL, &cp), DAT_SUCCESS);
	CHECK(cp.local_ep_handle != DAT_HANDLE_NULL); /* the PSP made one: handing off frees it */
	CHECK_RET(dat_cr_handoff(cr, Q + 4), DAT_SUCCESS);
	ev = WAIT(other_evd, DAT_CONNECTION_REQUEST_EVENT);
	cr = ev.event_data.cr_arrival_event_data.cr_handle;
	CHECK_RET(dat_cr_query(cr, DAT_CR_FIELD_ALL, &cp), DAT_SUCCESS);
	CHECK(cp.local_ep_handle == rsp_ep);
	STATE(rsp_ep, DAT_EP_STATE_PASSIVE_CONNECTION_PENDING);
	CHECK_RET(dat_cr_accept(cr, DAT_HANDLE_NULL, 0, NULL), DAT_SUCCESS);
	CONN_EVENT(b, pb2, DAT_CONNECTION_EVENT_ESTABLISHED);
	CONN_EVENT(a, rsp_ep, DAT_CONNECTION_EVENT_ESTABLISHED);

	CHECK_RET(dat_ep_disconnect(pb, DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS);
	CHECK_RET(dat_ep_disconnect(pb2, DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS);
	CONN_EVENT(b, pb, DAT_CONNECTION_EVENT_DISCONNECTED);
	CONN_EVENT(b, pb2, DAT_CONNECTION_EVENT_DISCONNECTED);
	CONN_EVENT(a, pa, DAT_CONNECTION_EVENT_DISCONNECTED);
	CONN_EVENT(a, rsp_ep, DAT_CONNECTION_EVENT_DISCONNECTED);
	CHECK_RET(dat_rsp_free(rsp), DAT_SUCCESS);
	DAT_PSP_HANDLE psps[] = {p1, p2, p3};
	for (int i = 0; i < 3; i++)
		CHECK_RET(dat_psp_free(psps[i]), DAT_SUCCESS);
	DAT_EP_HANDLE eps[] = {pa, pb, rsp_ep, pb2};
	for (int i = 0; i < 4; i++)
		CHECK_RET(dat_ep_free(eps[i]), DAT_SUCCESS);
	CHECK_RET(dat_evd_free(other_evd), DAT_SUCCESS);
}

/* dat_ep_recv_query and dat_ep_set_watermark's soft high watermark (an async event once per
 * setting, the EP still connected). */
static void check_recv_side(struct side *a, struct side *b)
{
	DAT_EP_HANDLE pa = new_ep(a), pb = new_ep(b);
	DAT_PSP_HANDLE psp;
	struct mem ma, mb;
	reg(a, &ma);
	reg(b, &mb);
	DAT_COUNT nbufs = -1, span = -1;
	CHECK_RET(dat_ep_recv_query(pa, &nbufs, &span), DAT_SUCCESS);
	CHECK(nbufs == 0 && span == 0);
	CHECK_RET(dat_ep_recv_query(a->pz, &nbufs, &span),
		  ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP));
	CHECK_RET(dat_ep_set_watermark(pa, -2, DAT_WATERMARK_INFINITE),
		  ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2));
	CHECK_RET(dat_ep_set_watermark(pa, 1, -3), ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3));
	CHECK_RET(dat_ep_set_watermark(a->pz, 1, 1), ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP));
	CHECK_RET(dat_psp_create(a->ia, Q + 5, a->cr_evd, DAT_PSP_CONSUMER_FLAG, &psp), DAT_SUCCESS);
	connect_pair(a, b, pa, pb, Q + 5);
	CHECK_RET(dat_ep_set_watermark(pa, 1, DAT_WATERMARK_INFINITE), DAT_SUCCESS);
	DAT_DTO_COOKIE c = {.as_64 = 1};
	for (int i = 0; i < 2; i++) {
		DAT_LMR_TRIPLET iov = {ma.addr + 64 * (DAT_VADDR)i, 64, ma.lctx};
		CHECK_RET(dat_ep_post_recv(pa, 1, &iov, c, DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
	}
	DAT_EVENT ev = WAIT(a->async_evd, DAT_ASYNC_ERROR_EP_BROKEN);
	CHECK(ev.event_data.asynch_error_event_data.dat_handle == pa);
	CHECK(ev.event_data.asynch_error_event_data.reason == DAT_SRQ_SOFT_HIGH_WATERMARK_EVENT);
	CHECK_RET(dat_ep_recv_query(pa, &nbufs, NULL), DAT_SUCCESS);
	CHECK_RET(dat_ep_recv_query(pa, NULL, &span), DAT_SUCCESS);
	CHECK(nbufs == 2 && span == 2);
	DAT_LMR_TRIPLET send = {mb.addr, 8, mb.lctx};
	CHECK_RET(dat_ep_post_send(pb, 1, &send, c, DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
	WAIT(b->dto_evd, DAT_DTO_COMPLETION_EVENT);
	WAIT(a->dto_evd, DAT_DTO_COMPLETION_EVENT);
	CHECK_RET(dat_ep_recv_query(pa, &nbufs, &span), DAT_SUCCESS);
	CHECK(nbufs == 1 && span == 1); /* a completed receive is no longer allocated */
	STATE(pa, DAT_EP_STATE_CONNECTED);
	CHECK_RET(dat_ep_disconnect(pa, DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS);
	CONN_EVENT(a, pa, DAT_CONNECTION_EVENT_DISCONNECTED);
	CONN_EVENT(b, pb, DAT_CONNECTION_EVENT_DISCONNECTED);
	WAIT(a->dto_evd, DAT_DTO_COMPLETION_EVENT); /* the receive left, flushed */
	CHECK_RET(dat_psp_free(psp), DAT_SUCCESS);
	CHECK_RET(dat_ep_free(pa), DAT_SUCCESS);
	CHECK_RET(dat_ep_free(pb), DAT_SUCCESS);
	unreg(&ma);
	unreg(&mb);
}

/* The provider attributes that advertise the calls, and the calls the provider declines. */
static void check_attributes_and_declined(struct side *a)
{
	DAT_PROVIDER_ATTR pa;
	CHECK_RET(dat_ia_query(a->ia, NULL, 0, NULL, DAT_PROVIDER_FIELD_ALL, &pa), DAT_SUCCESS);
	CHECK(pa.ep_recv_info_supported == DAT_TRUE && pa.rmr_scope_supported == DAT_RMR_SCOPE_ANY);
	DAT_EP_HANDLE ep = new_ep(a);
	DAT_CNO_HANDLE cno;
	CHECK_RET(dat_cno_create(a->ia, DAT_OS_WAIT_PROXY_AGENT_NULL, &cno), DAT_SUCCESS);
	DAT_IA_HANDLE ia = provider_ia(a->conn_evd);
	DAT_PROVIDER *p = provider(ep);
	const DAT_RETURN mns = ERR(DAT_MODEL_NOT_SUPPORTED, 0);
	DAT_CSP_HANDLE csp = DAT_HANDLE_NULL;
	DAT_CSP_PARAM csp_param;
	DAT_COMM comm;
	memset(&comm, 0, sizeof(comm));
	CHECK_RET(p->csp_create_func(ia, &comm, (DAT_IA_ADDRESS_PTR)&a->address, a->cr_evd, &csp),
		  mns);
	CHECK_RET(p->csp_query_func(ep, DAT_CSP_FIELD_ALL, &csp_param), mns);
	CHECK_RET(p->csp_free_func(ep), mns);
	CHECK_RET(p->ep_common_connect_func(ep, (DAT_IA_ADDRESS_PTR)&a->address, WAIT_US, 0, NULL),
		  mns);
	DAT_LMR_TRIPLET iov = {0, 0, 0};
	DAT_RMR_TRIPLET rmr = {0, 0, 0};
	DAT_DTO_COOKIE c = {.as_64 = 0};
	CHECK_RET(p->ep_post_send_with_invalidate_func(ep, 0, &iov, c, 0, DAT_TRUE, 0), mns);
	CHECK_RET(p->ep_post_rdma_read_to_rmr_func(ep, &rmr, c, &rmr, 0), mns);
	DAT_FD fd;
	DAT_CNO_HANDLE fd_cno;
	CHECK_RET(p->cno_fd_create_func(ia, &fd, &fd_cno), mns);
	DAT_EVD_HANDLE evd;
	CHECK_RET(p->cno_trigger_func(cno, &evd), mns);
	DAT_BOOLEAN related;
	char name[] = "dfb";
	CHECK_RET(p->ia_ha_related_func(ia, name, &related), mns);
	STATE(ep, DAT_EP_STATE_UNCONNECTED); /* nothing changed */
	CHECK_RET(dat_cno_free(cno), DAT_SUCCESS);
	CHECK_RET(dat_ep_free(ep), DAT_SUCCESS);
}

int main(int argc, char **argv)
{
	struct side a, b;
	if (!open_sides(argc, argv, &a, &b))
		return 2;
	check_evd_state(&a);
	check_resize(&a);
	check_dup_connect_and_ep_windows(&a, &b);
	check_handoff(&a, &b);
	check_recv_side(&a, &b);
	check_attributes_and_declined(&a);
	return close_sides(&a, &b);
}
