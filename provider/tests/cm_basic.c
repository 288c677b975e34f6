/* Connection management through libdat2: PSPs (consumer and provider EPs), RSPs, connection
 * requests accepted and rejected with private data, connects nobody answers, disconnect and
 * reset, psp_create_any.
 *
 * usage: cm_basic PASSIVE_IA ACTIVE_IA
 * The two IA names may name two nodes listening on one port at two addresses (the connects
 * pass the passive node's address with port 0: the provider takes its own node's port), or
 * one node. Prints "PASSED" and exits 0 when every check holds; each failed check prints its
 * line. */
#define _GNU_SOURCE
#include "cm_side.h"

/* A PSP, a request with 48 bytes of private data that the passive side changes in place and
 * sends back in the accept (as dtestcm does), both sides ESTABLISHED, queries, a graceful
 * disconnect seen on both sides, reset. */
static void check_accept(struct side *a, struct side *b)
{
	DAT_EP_HANDLE pa = new_ep(a), pb = new_ep(b);
	DAT_PSP_HANDLE psp;
	CHECK_RET(dat_psp_create(a->ia, QUAL, a->cr_evd, DAT_PSP_CONSUMER_FLAG, &psp), DAT_SUCCESS);
	DAT_PSP_PARAM pp;
	CHECK_RET(dat_psp_query(psp, DAT_PSP_FIELD_ALL, &pp), DAT_SUCCESS);
	/* (ia_handle is the provider's: libdat2 hands programs its own IA handles) */
	CHECK(pp.ia_handle && pp.conn_qual == QUAL && pp.evd_handle == a->cr_evd &&
	      pp.psp_flags == DAT_PSP_CONSUMER_FLAG);
	STATE(pb, DAT_EP_STATE_UNCONNECTED);

	unsigned char pdata[48];
	pattern(pdata, 48, 1);
	struct sockaddr_in to = no_port(a);
	CHECK_RET(connect_ep(pb, &to, QUAL, 48, pdata), DAT_SUCCESS);
	memset(pdata, 0, sizeof(pdata)); /* the provider copied it */

	DAT_EVENT ev = WAIT(a->cr_evd, DAT_CONNECTION_REQUEST_EVENT);
	const DAT_CR_ARRIVAL_EVENT_DATA *cr_ev = &ev.event_data.cr_arrival_event_data;
	CHECK(cr_ev->sp_handle.psp_handle == psp);
	CHECK(cr_ev->conn_qual == QUAL);
	CHECK(cr_ev->local_ia_address_ptr && cr_ev->local_ia_address_ptr->sa_family == AF_INET);
	DAT_CR_HANDLE cr = cr_ev->cr_handle;
	DAT_HANDLE_TYPE type;
	CHECK_RET(dat_get_handle_type(cr, &type), DAT_SUCCESS);
	CHECK(type == DAT_HANDLE_TYPE_CR);
	DAT_CR_PARAM cp;
	memset(&cp, 0, sizeof(cp));
	CHECK_RET(dat_cr_query(cr, DAT_CR_FIELD_ALL, &cp), DAT_SUCCESS);
	CHECK(cp.private_data_size == 48 && has_pattern(cp.private_data, 48, 1));
	CHECK(cp.local_ep_handle == DAT_HANDLE_NULL);
	const struct sockaddr_in *from = (const struct sockaddr_in *)cp.remote_ia_address_ptr;
	CHECK(from && from->sin_family == AF_INET);
	CHECK(from && from->sin_addr.s_addr == b->address.sin_addr.s_addr);
	CHECK_RET(dat_cr_query(cr, DAT_CR_FIELD_ALL, NULL),
		  ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3));
	for (int i = 0; i < 48; i++) /* dtestcm answers with its request's bytes + 1 */
		((unsigned char *)cp.private_data)[i]++;
	STATE(pb, DAT_EP_STATE_ACTIVE_CONNECTION_PENDING);
	CHECK_RET(dat_cr_accept(cr, pa, 48, cp.private_data), DAT_SUCCESS);

	DAT_CONNECTION_EVENT_DATA est = CONN_EVENT(b, pb, DAT_CONNECTION_EVENT_ESTABLISHED);
	CHECK(est.private_data_size == 48 && est.private_data &&
	      has_pattern(est.private_data, 48, 2));
	CONN_EVENT(a, pa, DAT_CONNECTION_EVENT_ESTABLISHED);
	STATE(pa, DAT_EP_STATE_CONNECTED);
	STATE(pb, DAT_EP_STATE_CONNECTED);

	DAT_EP_PARAM ep_param;
	CHECK_RET(dat_ep_query(pb, DAT_EP_FIELD_ALL, &ep_param), DAT_SUCCESS);
	const struct sockaddr_in *peer = (const struct sockaddr_in *)ep_param.remote_ia_address_ptr;
	CHECK(peer->sin_addr.s_addr == a->address.sin_addr.s_addr &&
	      peer->sin_port == a->address.sin_port); /* port 0 became the node's port */
	CHECK(ep_param.remote_port_qual == QUAL);
	CHECK_RET(dat_ep_query(pa, DAT_EP_FIELD_ALL, &ep_param), DAT_SUCCESS);
	peer = (const struct sockaddr_in *)ep_param.remote_ia_address_ptr;
	CHECK(peer->sin_addr.s_addr == b->address.sin_addr.s_addr);

	/* what a connected EP refuses */
	CHECK_RET(connect_ep(pb, &to, QUAL, 0, NULL),
		  ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_CONNECTED));
	CHECK_RET(dat_ep_reset(pb), ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_CONNECTED));
	CHECK_RET(dat_rsp_create(a->ia, QUAL + 9, pa, a->cr_evd, &(DAT_RSP_HANDLE){0}),
		  ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_CONNECTED));

	CHECK_RET(dat_ep_disconnect(pb, DAT_CLOSE_GRACEFUL_FLAG), DAT_SUCCESS);
	DAT_CONNECTION_EVENT_DATA disc = CONN_EVENT(b, pb, DAT_CONNECTION_EVENT_DISCONNECTED);
	CHECK(disc.private_data_size == 0);
	CONN_EVENT(a, pa, DAT_CONNECTION_EVENT_DISCONNECTED);
	STATE(pa, DAT_EP_STATE_DISCONNECTED);
	STATE(pb, DAT_EP_STATE_DISCONNECTED);
	/* ESTABLISHED's private data stays readable until the EP is reset or freed */
	CHECK(has_pattern(est.private_data, 48, 2));
	CHECK_RET(dat_ep_disconnect(pb, DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS); /* no effect */
	CHECK_RET(dat_ep_reset(pa), DAT_SUCCESS);
	CHECK_RET(dat_ep_reset(pb), DAT_SUCCESS);
	STATE(pa, DAT_EP_STATE_UNCONNECTED);
	STATE(pb, DAT_EP_STATE_UNCONNECTED);

	/* a reset EP connects again, here with the node's full address */
	CHECK_RET(connect_ep(pb, &a->address, QUAL, 0, NULL), DAT_SUCCESS);
	ev = WAIT(a->cr_evd, DAT_CONNECTION_REQUEST_EVENT);
	CHECK_RET(dat_cr_query(ev.event_data.cr_arrival_event_data.cr_handle, DAT_CR_FIELD_ALL,
			       &cp),
		  DAT_SUCCESS);
	CHECK(cp.private_data_size == 0);
	CHECK_RET(dat_cr_accept(ev.event_data.cr_arrival_event_data.cr_handle, pa, 0, NULL),
		  DAT_SUCCESS);
	est = CONN_EVENT(b, pb, DAT_CONNECTION_EVENT_ESTABLISHED);
	CHECK(est.private_data_size == 0);
	CONN_EVENT(a, pa, DAT_CONNECTION_EVENT_ESTABLISHED);
	CHECK_RET(dat_ep_disconnect(pa, DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS); /* the passive side */
	CONN_EVENT(a, pa, DAT_CONNECTION_EVENT_DISCONNECTED);
	CONN_EVENT(b, pb, DAT_CONNECTION_EVENT_DISCONNECTED);

	CHECK_RET(dat_psp_free(psp), DAT_SUCCESS);
	CHECK_RET(dat_ep_free(pa), DAT_SUCCESS);
	CHECK_RET(dat_ep_free(pb), DAT_SUCCESS);
}

/* A rejected request: PEER_REJECTED with the rejecter's private data; the EP connects again
 * after dat_ep_reset. A conn_qual nobody listens on: NON_PEER_REJECTED; an address with no
 * daemon behind it: UNREACHABLE. */
static void check_rejects(struct side *a, struct side *b)
{
	DAT_EP_HANDLE pb = new_ep(b);
	DAT_PSP_HANDLE psp;
	CHECK_RET(dat_psp_create(a->ia, QUAL + 1, a->cr_evd, DAT_PSP_CONSUMER_FLAG, &psp),
		  DAT_SUCCESS);
	struct sockaddr_in to = no_port(a);
	char hello[] = "hello", nope[] = "not now";
	CHECK_RET(connect_ep(pb, &to, QUAL + 1, 5, hello), DAT_SUCCESS);
	DAT_EVENT ev = WAIT(a->cr_evd, DAT_CONNECTION_REQUEST_EVENT);
	DAT_CR_HANDLE cr = ev.event_data.cr_arrival_event_data.cr_handle;
	DAT_CR_PARAM cp;
	CHECK_RET(dat_cr_query(cr, DAT_CR_FIELD_ALL, &cp), DAT_SUCCESS);
	CHECK(cp.private_data_size == 5 && !memcmp(cp.private_data, "hello", 5));
	CHECK_RET(dat_cr_reject(cr, -1, nope), ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2));
	CHECK_RET(dat_cr_reject(cr, 7, NULL), ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3));
	CHECK_RET(dat_cr_reject(cr, 7, nope), DAT_SUCCESS);
	DAT_CONNECTION_EVENT_DATA d = CONN_EVENT(b, pb, DAT_CONNECTION_EVENT_PEER_REJECTED);
	CHECK(d.private_data_size == 7 && d.private_data && !memcmp(d.private_data, nope, 7));
	STATE(pb, DAT_EP_STATE_DISCONNECTED);
	CHECK_RET(connect_ep(pb, &to, QUAL + 1, 0, NULL),
		  ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_DISCONNECTED));
	CHECK_RET(dat_ep_reset(pb), DAT_SUCCESS);

	CHECK_RET(connect_ep(pb, &to, NOBODY, 0, NULL), DAT_SUCCESS);
	d = CONN_EVENT(b, pb, DAT_CONNECTION_EVENT_NON_PEER_REJECTED);
	CHECK(d.private_data_size == 0);
	STATE(pb, DAT_EP_STATE_DISCONNECTED);
	CHECK_RET(dat_ep_reset(pb), DAT_SUCCESS);

	struct sockaddr_in nowhere = a->address; /* nothing listens at 127.0.0.3 */
	nowhere.sin_addr.s_addr = htonl(0x7f000003);
	CHECK_RET(connect_ep(pb, &nowhere, QUAL + 1, 0, NULL), DAT_SUCCESS);
	CONN_EVENT(b, pb, DAT_CONNECTION_EVENT_UNREACHABLE);
	STATE(pb, DAT_EP_STATE_DISCONNECTED);
	CHECK_RET(dat_ep_reset(pb), DAT_SUCCESS);

	CHECK_RET(dat_psp_free(psp), DAT_SUCCESS);
	CHECK_RET(dat_ep_free(pb), DAT_SUCCESS);
}

/* dat_psp_free with a request not yet answered: the CR stays valid and can be accepted; the
 * freed PSP's conn_qual takes no new request. */
static void check_psp_free_with_pending_cr(struct side *a, struct side *b)
{
	DAT_EP_HANDLE pa = new_ep(a), pb = new_ep(b), pb2 = new_ep(b);
	DAT_PSP_HANDLE psp;
	CHECK_RET(dat_psp_create(a->ia, QUAL + 2, a->cr_evd, DAT_PSP_CONSUMER_FLAG, &psp),
		  DAT_SUCCESS);
	struct sockaddr_in to = no_port(a);
	CHECK_RET(connect_ep(pb, &to, QUAL + 2, 3, "abc"), DAT_SUCCESS);
	DAT_EVENT ev = WAIT(a->cr_evd, DAT_CONNECTION_REQUEST_EVENT);
	DAT_CR_HANDLE cr = ev.event_data.cr_arrival_event_data.cr_handle;
	CHECK_RET(dat_psp_free(psp), DAT_SUCCESS);
	DAT_CR_PARAM cp;
	CHECK_RET(dat_cr_query(cr, DAT_CR_FIELD_ALL, &cp), DAT_SUCCESS);
	CHECK(cp.private_data_size == 3 && !memcmp(cp.private_data, "abc", 3));
	CHECK_RET(connect_ep(pb2, &to, QUAL + 2, 0, NULL), DAT_SUCCESS);
	CONN_EVENT(b, pb2, DAT_CONNECTION_EVENT_NON_PEER_REJECTED);
	CHECK_RET(dat_cr_accept(cr, pa, 0, NULL), DAT_SUCCESS);
	CONN_EVENT(b, pb, DAT_CONNECTION_EVENT_ESTABLISHED);
	CONN_EVENT(a, pa, DAT_CONNECTION_EVENT_ESTABLISHED);
	CHECK_RET(dat_ep_disconnect(pb, DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS);
	CONN_EVENT(b, pb, DAT_CONNECTION_EVENT_DISCONNECTED);
	CONN_EVENT(a, pa, DAT_CONNECTION_EVENT_DISCONNECTED);
	CHECK_RET(dat_ep_free(pa), DAT_SUCCESS);
	CHECK_RET(dat_ep_free(pb), DAT_SUCCESS);
	CHECK_RET(dat_ep_free(pb2), DAT_SUCCESS);
}

/* An RSP: its EP is RESERVED, then PASSIVE_CONNECTION_PENDING with the request, which is
 * accepted with no EP named; dat_rsp_free succeeds after the RSP fired (dapltest's
 * performance server frees it then). An RSP freed unused returns its EP to UNCONNECTED. */
static void check_rsp(struct side *a, struct side *b)
{
	DAT_EP_HANDLE pa = new_ep(a), other = new_ep(a), pb = new_ep(b);
	DAT_RSP_HANDLE rsp;
	CHECK_RET(dat_rsp_create(a->ia, QUAL + 3, pa, a->cr_evd, &rsp), DAT_SUCCESS);
	STATE(pa, DAT_EP_STATE_RESERVED);
	DAT_RSP_PARAM rp;
	CHECK_RET(dat_rsp_query(rsp, DAT_RSP_FIELD_ALL, &rp), DAT_SUCCESS);
	CHECK(rp.ia_handle && rp.conn_qual == QUAL + 3 && rp.evd_handle == a->cr_evd &&
	      rp.ep_handle == pa);
	CHECK_RET(dat_rsp_query(rsp, DAT_RSP_FIELD_ALL, NULL),
		  ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3));
	CHECK_RET(dat_ep_free(pa), ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_RESERVED));
	struct sockaddr_in to = no_port(a);
	CHECK_RET(connect_ep(pb, &to, QUAL + 3, 2, "hi"), DAT_SUCCESS);
	DAT_EVENT ev = WAIT(a->cr_evd, DAT_CONNECTION_REQUEST_EVENT);
	DAT_CR_HANDLE cr = ev.event_data.cr_arrival_event_data.cr_handle;
	CHECK(ev.event_data.cr_arrival_event_data.conn_qual == QUAL + 3);
	DAT_CR_PARAM cp;
	CHECK_RET(dat_cr_query(cr, DAT_CR_FIELD_ALL, &cp), DAT_SUCCESS);
	CHECK(cp.local_ep_handle == pa);
	STATE(pa, DAT_EP_STATE_PASSIVE_CONNECTION_PENDING);
	/* a request that carries its EP is accepted with no other */
	CHECK_RET(dat_cr_accept(cr, other, 0, NULL),
		  ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP));
	CHECK_RET(dat_cr_accept(cr, DAT_HANDLE_NULL, 0, NULL), DAT_SUCCESS);
	CONN_EVENT(a, pa, DAT_CONNECTION_EVENT_ESTABLISHED);
	CONN_EVENT(b, pb, DAT_CONNECTION_EVENT_ESTABLISHED);
	CHECK_RET(dat_rsp_free(rsp), DAT_SUCCESS);
	STATE(pa, DAT_EP_STATE_CONNECTED);
	CHECK_RET(dat_ep_disconnect(pb, DAT_CLOSE_GRACEFUL_FLAG), DAT_SUCCESS);
	CONN_EVENT(b, pb, DAT_CONNECTION_EVENT_DISCONNECTED);
	CONN_EVENT(a, pa, DAT_CONNECTION_EVENT_DISCONNECTED);

	CHECK_RET(dat_rsp_create(a->ia, QUAL + 3, other, a->cr_evd, &rsp), DAT_SUCCESS);
	STATE(other, DAT_EP_STATE_RESERVED);
	CHECK_RET(dat_rsp_free(rsp), DAT_SUCCESS);
	STATE(other, DAT_EP_STATE_UNCONNECTED);
	CHECK_RET(dat_ep_free(pa), DAT_SUCCESS);
	CHECK_RET(dat_ep_free(other), DAT_SUCCESS);
	CHECK_RET(dat_ep_free(pb), DAT_SUCCESS);
}

/* A PSP with the PROVIDER flag: the request carries an EP the provider made, in
 * TENTATIVE_CONNECTION_PENDING; it needs a PZ and EVDs (dat_ep_modify) before the accept. A
 * rejected request takes its EP with it. */
static void check_provider_psp(struct side *a, struct side *b)
{
	DAT_EP_HANDLE pb = new_ep(b);
	DAT_PSP_HANDLE psp;
	CHECK_RET(dat_psp_create(a->ia, QUAL + 4, a->cr_evd, DAT_PSP_PROVIDER_FLAG, &psp),
		  DAT_SUCCESS);
	struct sockaddr_in to = no_port(a);
	CHECK_RET(connect_ep(pb, &to, QUAL + 4, 0, NULL), DAT_SUCCESS);
	DAT_EVENT ev = WAIT(a->cr_evd, DAT_CONNECTION_REQUEST_EVENT);
	DAT_CR_HANDLE cr = ev.event_data.cr_arrival_event_data.cr_handle;
	DAT_CR_PARAM cp;
	CHECK_RET(dat_cr_query(cr, DAT_CR_FIELD_ALL, &cp), DAT_SUCCESS);
	DAT_EP_HANDLE made = cp.local_ep_handle;
	CHECK(made != DAT_HANDLE_NULL);
	DAT_HANDLE_TYPE type = 0;
	CHECK_RET(dat_get_handle_type(made, &type), DAT_SUCCESS);
	CHECK(type == DAT_HANDLE_TYPE_EP);
	STATE(made, DAT_EP_STATE_TENTATIVE_CONNECTION_PENDING);
	CHECK_RET(dat_cr_accept(cr, DAT_HANDLE_NULL, 0, NULL),
		  ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_NOTREADY));
	DAT_EP_PARAM p;
	memset(&p, 0, sizeof(p));
	p.pz_handle = a->pz;
	p.recv_evd_handle = a->dto_evd;
	p.request_evd_handle = a->dto_evd;
	p.connect_evd_handle = a->conn_evd;
	CHECK_RET(dat_ep_modify(made,
				DAT_EP_FIELD_PZ_HANDLE | DAT_EP_FIELD_RECV_EVD_HANDLE |
					DAT_EP_FIELD_REQUEST_EVD_HANDLE |
					DAT_EP_FIELD_CONNECT_EVD_HANDLE,
				&p),
		  DAT_SUCCESS);
	CHECK_RET(dat_cr_accept(cr, DAT_HANDLE_NULL, 4, "ok!"), DAT_SUCCESS);
	DAT_EP_STATE state = 0;
	CHECK_RET(dat_ep_get_status(made, &state, NULL, NULL), DAT_SUCCESS);
	CHECK(state == DAT_EP_STATE_COMPLETION_PENDING || /* or the RTU came already */
	      state == DAT_EP_STATE_CONNECTED);
	DAT_CONNECTION_EVENT_DATA d = CONN_EVENT(b, pb, DAT_CONNECTION_EVENT_ESTABLISHED);
	CHECK(d.private_data_size == 4 && !memcmp(d.private_data, "ok!", 4));
	CONN_EVENT(a, made, DAT_CONNECTION_EVENT_ESTABLISHED);
	STATE(made, DAT_EP_STATE_CONNECTED);
	CHECK_RET(dat_ep_disconnect(made, DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS);
	CONN_EVENT(a, made, DAT_CONNECTION_EVENT_DISCONNECTED);
	CONN_EVENT(b, pb, DAT_CONNECTION_EVENT_DISCONNECTED);
	CHECK_RET(dat_ep_free(made), DAT_SUCCESS);
	CHECK_RET(dat_ep_reset(pb), DAT_SUCCESS);

	CHECK_RET(connect_ep(pb, &to, QUAL + 4, 0, NULL), DAT_SUCCESS);
	ev = WAIT(a->cr_evd, DAT_CONNECTION_REQUEST_EVENT);
	CHECK_RET(dat_cr_query(ev.event_data.cr_arrival_event_data.cr_handle, DAT_CR_FIELD_ALL,
			       &cp),
		  DAT_SUCCESS);
	CHECK(cp.local_ep_handle != DAT_HANDLE_NULL);
	CHECK_RET(dat_cr_reject(ev.event_data.cr_arrival_event_data.cr_handle, 0, NULL),
		  DAT_SUCCESS);
	CONN_EVENT(b, pb, DAT_CONNECTION_EVENT_PEER_REJECTED);
	CHECK_RET(dat_psp_free(psp), DAT_SUCCESS);
	CHECK_RET(dat_ep_free(pb), DAT_SUCCESS);
}

/* dat_psp_create_any picks a free conn_qual, which then is in use. */
static void check_psp_create_any(struct side *a)
{
	DAT_CONN_QUAL q = 0;
	DAT_PSP_HANDLE psp, again;
	CHECK_RET(dat_psp_create_any(a->ia, &q, a->cr_evd, DAT_PSP_CONSUMER_FLAG, &psp),
		  DAT_SUCCESS);
	DAT_PSP_PARAM pp;
	CHECK_RET(dat_psp_query(psp, DAT_PSP_FIELD_ALL, &pp), DAT_SUCCESS);
	CHECK(pp.conn_qual == q && q != 0);
	CHECK_RET(dat_psp_create(a->ia, q, a->cr_evd, DAT_PSP_CONSUMER_FLAG, &again),
		  ERR(DAT_CONN_QUAL_IN_USE, 0));
	CHECK_RET(dat_psp_create_any(a->ia, NULL, a->cr_evd, DAT_PSP_CONSUMER_FLAG, &again),
		  ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2));
	CHECK_RET(dat_psp_free(psp), DAT_SUCCESS);
}

int main(int argc, char **argv)
{
	struct side a, b;
	if (!open_sides(argc, argv, &a, &b))
		return 2;
	check_accept(&a, &b);
	check_rejects(&a, &b);
	check_psp_free_with_pending_cr(&a, &b);
	check_rsp(&a, &b);
	check_provider_psp(&a, &b);
	check_psp_create_any(&a);
	return close_sides(&a, &b);
}
