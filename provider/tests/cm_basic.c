/* Connection management through libdat2: PSPs (consumer and provider EPs), RSPs, connection
 * requests accepted and rejected with private data, connects nobody answers, disconnect and
 * reset, the arguments each call refuses, and connects from several threads at once.
 *
 * usage: cm_basic PASSIVE_IA ACTIVE_IA
 * The two IA names may name two nodes listening on one port at two addresses (the connects
 * pass the passive node's address with port 0: the provider takes its own node's port), or
 * one node. Prints "PASSED" and exits 0 when every check holds; each failed check prints its
 * line. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dat2/udat.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#define WAIT_US (20 * 1000 * 1000)
#define QUAL 5100 /* conn_quals QUAL, QUAL + 1, ... */
#define NOBODY 5199 /* a conn_qual nobody listens on */
#define THREADS 4

/* One side: an IA with a PZ and its CR, connection and DTO EVDs. */
struct side {
	DAT_IA_HANDLE ia;
	DAT_EVD_HANDLE async_evd, cr_evd, conn_evd, dto_evd;
	DAT_PZ_HANDLE pz;
	struct sockaddr_in address; /* the node's, as dat_ia_query gives it */
};

static void open_side(struct side *s, char *name)
{
	memset(s, 0, sizeof(*s));
	DAT_RETURN ret = dat_ia_open(name, 8, &s->async_evd, &s->ia);
	if (ret != DAT_SUCCESS) {
		printf("FAILED: dat_ia_open(%s) gave 0x%08x\n", name, (unsigned)ret);
		exit(1);
	}
	CHECK_RET(dat_pz_create(s->ia, &s->pz), DAT_SUCCESS);
	CHECK_RET(dat_evd_create(s->ia, 8, DAT_HANDLE_NULL, DAT_EVD_CR_FLAG, &s->cr_evd),
		  DAT_SUCCESS);
	CHECK_RET(dat_evd_create(s->ia, 16, DAT_HANDLE_NULL, DAT_EVD_CONNECTION_FLAG, &s->conn_evd),
		  DAT_SUCCESS);
	CHECK_RET(dat_evd_create(s->ia, 16, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &s->dto_evd),
		  DAT_SUCCESS);
	DAT_IA_ATTR attr;
	CHECK_RET(dat_ia_query(s->ia, NULL, DAT_IA_FIELD_ALL, &attr, 0, NULL), DAT_SUCCESS);
	CHECK(attr.ia_address_ptr->sa_family == AF_INET);
	memcpy(&s->address, attr.ia_address_ptr, sizeof(s->address));
}

static void close_side(struct side *s)
{
	CHECK_RET(dat_evd_free(s->dto_evd), DAT_SUCCESS);
	CHECK_RET(dat_evd_free(s->conn_evd), DAT_SUCCESS);
	CHECK_RET(dat_evd_free(s->cr_evd), DAT_SUCCESS);
	CHECK_RET(dat_pz_free(s->pz), DAT_SUCCESS);
	CHECK_RET(dat_ia_close(s->ia, DAT_CLOSE_GRACEFUL_FLAG), DAT_SUCCESS);
}

static DAT_EP_HANDLE new_ep(const struct side *s)
{
	DAT_EP_HANDLE ep = DAT_HANDLE_NULL;
	CHECK_RET(dat_ep_create(s->ia, s->pz, s->dto_evd, s->dto_evd, s->conn_evd, NULL, &ep),
		  DAT_SUCCESS);
	return ep;
}

static DAT_EVENT wait_event(DAT_EVD_HANDLE evd, DAT_EVENT_NUMBER want, int line)
{
	DAT_EVENT ev;
	DAT_COUNT nmore;
	memset(&ev, 0, sizeof(ev));
	DAT_RETURN ret = dat_evd_wait(evd, WAIT_US, 1, &ev, &nmore);
	if (ret != DAT_SUCCESS || ev.event_number != want) {
		printf("FAILED line %d: wait gave 0x%08x, event 0x%x, not 0x%x\n", line,
		       (unsigned)ret, (unsigned)ev.event_number, (unsigned)want);
		failures++;
	}
	return ev;
}
#define WAIT(evd, want) wait_event((evd), (want), __LINE__)

static void check_state(DAT_EP_HANDLE ep, DAT_EP_STATE want, int line)
{
	DAT_EP_STATE state = (DAT_EP_STATE)-1;
	DAT_RETURN ret = dat_ep_get_status(ep, &state, NULL, NULL);
	if (ret != DAT_SUCCESS || state != want) {
		printf("FAILED line %d: state %d (0x%08x), not %d\n", line, (int)state,
		       (unsigned)ret, (int)want);
		failures++;
	}
}
#define STATE(ep, want) check_state((ep), (want), __LINE__)

/* The connection event of ``ep`` on its side's connection EVD. */
static DAT_CONNECTION_EVENT_DATA conn_event(const struct side *s, DAT_EP_HANDLE ep,
					    DAT_EVENT_NUMBER want, int line)
{
	DAT_EVENT ev = wait_event(s->conn_evd, want, line);
	DAT_CONNECTION_EVENT_DATA d = ev.event_data.connect_event_data;
	if (d.ep_handle != ep) {
		printf("FAILED line %d: the event names EP %p, not %p\n", line, d.ep_handle, ep);
		failures++;
	}
	return d;
}
#define CONN_EVENT(s, ep, want) conn_event((s), (ep), (want), __LINE__)

/* The passive node's address as dtest passes it: from a host name, with no port. */
static struct sockaddr_in no_port(const struct side *s)
{
	struct sockaddr_in to = s->address;
	to.sin_port = 0;
	return to;
}

static void pattern(unsigned char *p, int n, int base)
{
	for (int i = 0; i < n; i++)
		p[i] = (unsigned char)(base + i);
}

static int has_pattern(const unsigned char *p, int n, int base)
{
	for (int i = 0; i < n; i++)
		if (p[i] != (unsigned char)(base + i))
			return 0;
	return 1;
}

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
	CHECK_RET(dat_ep_connect(pb, (DAT_IA_ADDRESS_PTR)&to, QUAL, WAIT_US, 48, pdata,
				 DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG),
		  DAT_SUCCESS);
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
	CHECK_RET(dat_ep_connect(pb, (DAT_IA_ADDRESS_PTR)&to, QUAL, WAIT_US, 0, NULL,
				 DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG),
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
	CHECK_RET(dat_ep_connect(pb, (DAT_IA_ADDRESS_PTR)&a->address, QUAL, WAIT_US, 0, NULL,
				 DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG),
		  DAT_SUCCESS);
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
	CHECK_RET(dat_ep_connect(pb, (DAT_IA_ADDRESS_PTR)&to, QUAL + 1, WAIT_US, 5, hello,
				 DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG),
		  DAT_SUCCESS);
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
	CHECK_RET(dat_ep_connect(pb, (DAT_IA_ADDRESS_PTR)&to, QUAL + 1, WAIT_US, 0, NULL,
				 DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG),
		  ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_DISCONNECTED));
	CHECK_RET(dat_ep_reset(pb), DAT_SUCCESS);

	CHECK_RET(dat_ep_connect(pb, (DAT_IA_ADDRESS_PTR)&to, NOBODY, WAIT_US, 0, NULL,
				 DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG),
		  DAT_SUCCESS);
	d = CONN_EVENT(b, pb, DAT_CONNECTION_EVENT_NON_PEER_REJECTED);
	CHECK(d.private_data_size == 0);
	STATE(pb, DAT_EP_STATE_DISCONNECTED);
	CHECK_RET(dat_ep_reset(pb), DAT_SUCCESS);

	struct sockaddr_in nowhere = a->address; /* nothing listens at 127.0.0.3 */
	nowhere.sin_addr.s_addr = htonl(0x7f000003);
	CHECK_RET(dat_ep_connect(pb, (DAT_IA_ADDRESS_PTR)&nowhere, QUAL + 1, WAIT_US, 0, NULL,
				 DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG),
		  DAT_SUCCESS);
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
	CHECK_RET(dat_ep_connect(pb, (DAT_IA_ADDRESS_PTR)&to, QUAL + 2, WAIT_US, 3, "abc",
				 DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG),
		  DAT_SUCCESS);
	DAT_EVENT ev = WAIT(a->cr_evd, DAT_CONNECTION_REQUEST_EVENT);
	DAT_CR_HANDLE cr = ev.event_data.cr_arrival_event_data.cr_handle;
	CHECK_RET(dat_psp_free(psp), DAT_SUCCESS);
	DAT_CR_PARAM cp;
	CHECK_RET(dat_cr_query(cr, DAT_CR_FIELD_ALL, &cp), DAT_SUCCESS);
	CHECK(cp.private_data_size == 3 && !memcmp(cp.private_data, "abc", 3));
	CHECK_RET(dat_ep_connect(pb2, (DAT_IA_ADDRESS_PTR)&to, QUAL + 2, WAIT_US, 0, NULL,
				 DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG),
		  DAT_SUCCESS);
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
	CHECK_RET(dat_ep_connect(pb, (DAT_IA_ADDRESS_PTR)&to, QUAL + 3, WAIT_US, 2, "hi",
				 DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG),
		  DAT_SUCCESS);
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
	CHECK_RET(dat_ep_connect(pb, (DAT_IA_ADDRESS_PTR)&to, QUAL + 4, WAIT_US, 0, NULL,
				 DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG),
		  DAT_SUCCESS);
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

	CHECK_RET(dat_ep_connect(pb, (DAT_IA_ADDRESS_PTR)&to, QUAL + 4, WAIT_US, 0, NULL,
				 DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG),
		  DAT_SUCCESS);
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

/* An EP freed with its connection event still queued: the event names no EP, and the IA
 * goes on (the program freed what the event was about). */
static void check_event_of_a_freed_ep(struct side *a, struct side *b)
{
	DAT_EP_HANDLE pa = new_ep(a), pb = new_ep(b);
	DAT_PSP_HANDLE psp;
	CHECK_RET(dat_psp_create(a->ia, QUAL + 5, a->cr_evd, DAT_PSP_CONSUMER_FLAG, &psp),
		  DAT_SUCCESS);
	struct sockaddr_in to = no_port(a);
	CHECK_RET(dat_ep_connect(pb, (DAT_IA_ADDRESS_PTR)&to, QUAL + 5, WAIT_US, 0, NULL,
				 DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG),
		  DAT_SUCCESS);
	DAT_EVENT ev = WAIT(a->cr_evd, DAT_CONNECTION_REQUEST_EVENT);
	CHECK_RET(dat_cr_accept(ev.event_data.cr_arrival_event_data.cr_handle, pa, 0, NULL),
		  DAT_SUCCESS);
	CONN_EVENT(b, pb, DAT_CONNECTION_EVENT_ESTABLISHED);
	CONN_EVENT(a, pa, DAT_CONNECTION_EVENT_ESTABLISHED);
	CHECK_RET(dat_ep_disconnect(pb, DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS);
	CHECK_RET(dat_ep_free(pb), DAT_SUCCESS); /* its DISCONNECTED is queued */
	ev = WAIT(b->conn_evd, DAT_CONNECTION_EVENT_DISCONNECTED);
	CHECK(ev.event_data.connect_event_data.ep_handle == DAT_HANDLE_NULL);
	CONN_EVENT(a, pa, DAT_CONNECTION_EVENT_DISCONNECTED);
	DAT_PZ_HANDLE pz = DAT_HANDLE_NULL;
	CHECK_RET(dat_pz_create(b->ia, &pz), DAT_SUCCESS); /* the IA is still there */
	if (pz != DAT_HANDLE_NULL)
		CHECK_RET(dat_pz_free(pz), DAT_SUCCESS);
	CHECK_RET(dat_psp_free(psp), DAT_SUCCESS);
	CHECK_RET(dat_ep_free(pa), DAT_SUCCESS);
}

/* What each call refuses before or at the daemon: bad handles (another kind of object), NULL
 * outputs, bad sizes, flags, QoS and states. */
static void check_arguments(struct side *a, struct side *b)
{
	DAT_EP_HANDLE pb = new_ep(b);
	DAT_PSP_HANDLE psp = DAT_HANDLE_NULL;
	DAT_RSP_HANDLE rsp;
	struct sockaddr_in to = no_port(a);
	DAT_IA_ADDRESS_PTR addr = (DAT_IA_ADDRESS_PTR)&to;
	char big[1024] = {0};
	void *pz = b->pz; /* a live handle of the wrong kind */

	CHECK_RET(dat_ep_connect(pz, addr, QUAL, WAIT_US, 0, NULL, DAT_QOS_BEST_EFFORT, 0),
		  ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP));
	CHECK_RET(dat_ep_connect(pb, NULL, QUAL, WAIT_US, 0, NULL, DAT_QOS_BEST_EFFORT, 0),
		  ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2));
	struct sockaddr unix_addr = {.sa_family = AF_UNIX};
	CHECK_RET(dat_ep_connect(pb, &unix_addr, QUAL, WAIT_US, 0, NULL, DAT_QOS_BEST_EFFORT, 0),
		  ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2));
	CHECK_RET(dat_ep_connect(pb, addr, QUAL, 0, 0, NULL, DAT_QOS_BEST_EFFORT, 0),
		  ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4));
	CHECK_RET(dat_ep_connect(pb, addr, QUAL, WAIT_US, -1, NULL, DAT_QOS_BEST_EFFORT, 0),
		  ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG5));
	CHECK_RET(dat_ep_connect(pb, addr, QUAL, WAIT_US, sizeof(big), big, DAT_QOS_BEST_EFFORT, 0),
		  ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG5));
	CHECK_RET(dat_ep_connect(pb, addr, QUAL, WAIT_US, 8, NULL, DAT_QOS_BEST_EFFORT, 0),
		  ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG6));
	CHECK_RET(dat_ep_connect(pb, addr, QUAL, WAIT_US, 0, NULL, DAT_QOS_HIGH_THROUGHPUT, 0),
		  ERR(DAT_MODEL_NOT_SUPPORTED, 0));
	STATE(pb, DAT_EP_STATE_UNCONNECTED); /* nothing of the refused connects happened */
	CHECK_RET(dat_ep_disconnect(pz, DAT_CLOSE_ABRUPT_FLAG),
		  ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP));
	CHECK_RET(dat_ep_disconnect(pb, 7), ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2));
	CHECK_RET(dat_ep_disconnect(pb, DAT_CLOSE_ABRUPT_FLAG),
		  ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_UNCONNECTED));
	CHECK_RET(dat_ep_reset(pz), ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP));
	CHECK_RET(dat_ep_reset(pb), DAT_SUCCESS); /* UNCONNECTED: nothing to do */
	CHECK_RET(dat_ep_dup_connect(pb, pb, WAIT_US, 0, NULL, DAT_QOS_BEST_EFFORT),
		  DAT_NOT_IMPLEMENTED);

	CHECK_RET(dat_psp_create(pz, QUAL, a->cr_evd, DAT_PSP_CONSUMER_FLAG, &psp),
		  ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_IA));
	CHECK_RET(dat_psp_create(a->ia, QUAL, a->pz, DAT_PSP_CONSUMER_FLAG, &psp),
		  ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_CR));
	CHECK_RET(dat_psp_create(a->ia, QUAL, b->cr_evd, DAT_PSP_CONSUMER_FLAG, &psp),
		  ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_CR)); /* another IA's EVD */
	CHECK_RET(dat_psp_create(a->ia, QUAL, a->cr_evd, 7, &psp),
		  ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4));
	CHECK_RET(dat_psp_create(a->ia, QUAL, a->cr_evd, DAT_PSP_CONSUMER_FLAG, NULL),
		  ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG5));
	CHECK_RET(dat_psp_create(a->ia, QUAL, a->cr_evd, DAT_PSP_CONSUMER_FLAG, &psp),
		  DAT_SUCCESS);
	DAT_PSP_HANDLE twice;
	CHECK_RET(dat_psp_create(a->ia, QUAL, a->cr_evd, DAT_PSP_CONSUMER_FLAG, &twice),
		  ERR(DAT_CONN_QUAL_IN_USE, 0));
	CHECK_RET(dat_psp_query(pz, DAT_PSP_FIELD_ALL, &(DAT_PSP_PARAM){0}),
		  ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_PSP));
	CHECK_RET(dat_psp_query(psp, DAT_PSP_FIELD_ALL, NULL),
		  ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3));
	CHECK_RET(dat_psp_free(pz), ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_PSP));
	CHECK_RET(dat_rsp_create(a->ia, QUAL, pz, a->cr_evd, &rsp),
		  ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP));
	CHECK_RET(dat_rsp_create(a->ia, QUAL, pb, a->cr_evd, &rsp), /* another IA's EP */
		  ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP));
	CHECK_RET(dat_rsp_query(pz, DAT_RSP_FIELD_ALL, &(DAT_RSP_PARAM){0}),
		  ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_RSP));
	CHECK_RET(dat_rsp_free(psp), ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_RSP));

	CHECK_RET(dat_cr_query(pz, DAT_CR_FIELD_ALL, &(DAT_CR_PARAM){0}),
		  ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_CR));
	CHECK_RET(dat_cr_accept(pz, pb, 0, NULL), ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_CR));
	CHECK_RET(dat_cr_reject(pz, 0, NULL), ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_CR));
	CHECK_RET(dat_cr_handoff(pz, QUAL), DAT_NOT_IMPLEMENTED);

	/* a request's accept: a bad EP, too much private data, then the right one */
	DAT_EP_HANDLE pa = new_ep(a);
	CHECK_RET(dat_ep_connect(pb, addr, QUAL, WAIT_US, 0, NULL, DAT_QOS_BEST_EFFORT, 0),
		  DAT_SUCCESS);
	DAT_EVENT ev = WAIT(a->cr_evd, DAT_CONNECTION_REQUEST_EVENT);
	DAT_CR_HANDLE cr = ev.event_data.cr_arrival_event_data.cr_handle;
	CHECK_RET(dat_cr_accept(cr, pz, 0, NULL), ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP));
	CHECK_RET(dat_cr_accept(cr, pb, 0, NULL), /* another IA's EP */
		  ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP));
	CHECK_RET(dat_cr_accept(cr, pa, sizeof(big), big),
		  ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3));
	CHECK_RET(dat_cr_accept(cr, pa, 4, NULL), ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4));
	CHECK_RET(dat_cr_reject(cr, sizeof(big), big),
		  ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2));
	CHECK_RET(dat_cr_accept(cr, pa, 0, NULL), DAT_SUCCESS);
	CONN_EVENT(b, pb, DAT_CONNECTION_EVENT_ESTABLISHED);
	CONN_EVENT(a, pa, DAT_CONNECTION_EVENT_ESTABLISHED);
	CHECK_RET(dat_ep_free(pa), DAT_SUCCESS); /* an implicit abrupt disconnect */
	CONN_EVENT(b, pb, DAT_CONNECTION_EVENT_DISCONNECTED);
	CHECK_RET(dat_psp_free(psp), DAT_SUCCESS);
	CHECK_RET(dat_ep_free(pb), DAT_SUCCESS);
}

/* Several threads connect their own EPs at once while the main thread accepts. */
struct client {
	struct side *a, *b;
	DAT_EVD_HANDLE conn_evd;
	DAT_EP_HANDLE ep;
	int index;
};

static void *client_thread(void *arg)
{
	struct client *c = arg;
	struct sockaddr_in to = no_port(c->a);
	unsigned char pdata[8];
	pattern(pdata, 8, c->index * 10);
	CHECK_RET(dat_ep_connect(c->ep, (DAT_IA_ADDRESS_PTR)&to, QUAL + 6, WAIT_US, 8, pdata,
				 DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG),
		  DAT_SUCCESS);
	DAT_EVENT ev = WAIT(c->conn_evd, DAT_CONNECTION_EVENT_ESTABLISHED);
	CHECK(ev.event_data.connect_event_data.ep_handle == c->ep);
	CHECK(ev.event_data.connect_event_data.private_data_size == 8 &&
	      has_pattern(ev.event_data.connect_event_data.private_data, 8, c->index * 10 + 1));
	CHECK_RET(dat_ep_disconnect(c->ep, DAT_CLOSE_GRACEFUL_FLAG), DAT_SUCCESS);
	ev = WAIT(c->conn_evd, DAT_CONNECTION_EVENT_DISCONNECTED);
	CHECK(ev.event_data.connect_event_data.ep_handle == c->ep);
	return NULL;
}

static void check_threads(struct side *a, struct side *b)
{
	DAT_PSP_HANDLE psp;
	CHECK_RET(dat_psp_create(a->ia, QUAL + 6, a->cr_evd, DAT_PSP_CONSUMER_FLAG, &psp),
		  DAT_SUCCESS);
	struct client c[THREADS];
	pthread_t t[THREADS];
	DAT_EP_HANDLE accepted[THREADS];
	for (int i = 0; i < THREADS; i++) {
		c[i] = (struct client){.a = a, .b = b, .index = i};
		CHECK_RET(dat_evd_create(b->ia, 4, DAT_HANDLE_NULL, DAT_EVD_CONNECTION_FLAG,
					 &c[i].conn_evd),
			  DAT_SUCCESS);
		CHECK_RET(dat_ep_create(b->ia, b->pz, b->dto_evd, b->dto_evd, c[i].conn_evd, NULL,
					&c[i].ep),
			  DAT_SUCCESS);
		accepted[i] = new_ep(a);
		pthread_create(&t[i], NULL, client_thread, &c[i]);
	}
	for (int i = 0; i < THREADS; i++) {
		DAT_EVENT ev = WAIT(a->cr_evd, DAT_CONNECTION_REQUEST_EVENT);
		DAT_CR_PARAM cp;
		DAT_CR_HANDLE cr = ev.event_data.cr_arrival_event_data.cr_handle;
		CHECK_RET(dat_cr_query(cr, DAT_CR_FIELD_ALL, &cp), DAT_SUCCESS);
		CHECK(cp.private_data_size == 8);
		unsigned char back[8];
		memcpy(back, cp.private_data, 8);
		for (int k = 0; k < 8; k++)
			back[k]++;
		CHECK_RET(dat_cr_accept(cr, accepted[i], 8, back), DAT_SUCCESS);
	}
	for (int i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	int established = 0, disconnected = 0;
	for (int i = 0; i < 2 * THREADS; i++) {
		DAT_EVENT ev;
		DAT_COUNT nmore;
		CHECK_RET(dat_evd_wait(a->conn_evd, WAIT_US, 1, &ev, &nmore), DAT_SUCCESS);
		established += ev.event_number == DAT_CONNECTION_EVENT_ESTABLISHED;
		disconnected += ev.event_number == DAT_CONNECTION_EVENT_DISCONNECTED;
	}
	CHECK(established == THREADS && disconnected == THREADS);
	for (int i = 0; i < THREADS; i++) {
		CHECK_RET(dat_ep_free(accepted[i]), DAT_SUCCESS);
		CHECK_RET(dat_ep_free(c[i].ep), DAT_SUCCESS);
		CHECK_RET(dat_evd_free(c[i].conn_evd), DAT_SUCCESS);
	}
	CHECK_RET(dat_psp_free(psp), DAT_SUCCESS);
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: %s PASSIVE_IA ACTIVE_IA\n", argv[0]);
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	struct side a, b;
	open_side(&a, argv[1]);
	open_side(&b, argv[2]);
	check_accept(&a, &b);
	check_rejects(&a, &b);
	check_psp_free_with_pending_cr(&a, &b);
	check_rsp(&a, &b);
	check_provider_psp(&a, &b);
	check_psp_create_any(&a);
	check_event_of_a_freed_ep(&a, &b);
	check_arguments(&a, &b);
	check_threads(&a, &b);
	close_side(&a);
	close_side(&b);
	printf(failures ? "FAILED\n" : "PASSED\n");
	return failures ? 1 : 0;
}
