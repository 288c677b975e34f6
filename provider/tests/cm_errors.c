/* Connection management through libdat2, the harder cases: a connection event of an EP the
 * program freed, the arguments each call refuses, and connects from several threads at once.
 *
 * usage: cm_errors PASSIVE_IA ACTIVE_IA   (as cm_basic) */
#define _GNU_SOURCE
#include <pthread.h>

#include "cm_side.h"

/* An EP freed with its connection event still queued: the event names no EP, and the IA
 * goes on (the program freed what the event was about). */
static void check_event_of_a_freed_ep(struct side *a, struct side *b)
{
	DAT_EP_HANDLE pa = new_ep(a), pb = new_ep(b);
	DAT_PSP_HANDLE psp;
	CHECK_RET(dat_psp_create(a->ia, QUAL + 5, a->cr_evd, DAT_PSP_CONSUMER_FLAG, &psp),
		  DAT_SUCCESS);
	struct sockaddr_in to = no_port(a);
	CHECK_RET(connect_ep(pb, &to, QUAL + 5, 0, NULL), DAT_SUCCESS);
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
		  ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_UNCONNECTED)); /* dup_ep unconnected */
	CHECK_RET(dat_ep_dup_connect(pz, pb, WAIT_US, 0, NULL, DAT_QOS_BEST_EFFORT),
		  ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP));

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
	CHECK_RET(dat_cr_handoff(pz, QUAL), ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_CR));

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
	CHECK_RET(connect_ep(c->ep, &to, QUAL + 6, 8, pdata), DAT_SUCCESS);
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
	struct side a, b;
	if (!open_sides(argc, argv, &a, &b))
		return 2;
	check_event_of_a_freed_ep(&a, &b);
	check_arguments(&a, &b);
	check_threads(&a, &b);
	return close_sides(&a, &b);
}
