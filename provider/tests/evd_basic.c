/* The provider's IA, PZ and EVD calls through libdat2, against a running daemon.
 *
 * usage: evd_basic IA_NAME [daemon-dies]
 * Prints "PASSED" and exits 0 when every check holds; the first failed check is printed with
 * its line and the DAT_RETURN it got. In "daemon-dies" mode it prints "WAITING", blocks in
 * dat_evd_wait until the test kills the daemon, and checks what a dead daemon must give. */
#define _GNU_SOURCE
#include <dat2/udat.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

struct waiter {
	DAT_EVD_HANDLE evd;
	DAT_TIMEOUT timeout;
	DAT_RETURN ret;
	DAT_EVENT event;
	DAT_COUNT nmore;
};

static void *wait_thread(void *arg)
{
	struct waiter *w = arg;
	w->ret = dat_evd_wait(w->evd, w->timeout, 1, &w->event, &w->nmore);
	return NULL;
}

static DAT_EVENT software_event(void *pointer)
{
	DAT_EVENT ev;
	memset(&ev, 0, sizeof(ev));
	ev.event_number = DAT_SOFTWARE_EVENT;
	ev.event_data.software_event_data.pointer = pointer;
	return ev;
}

static void check_queries(DAT_IA_HANDLE ia, DAT_EVD_HANDLE async_evd, const char *name)
{
	DAT_IA_ATTR ia_attr;
	DAT_PROVIDER_ATTR pr_attr;
	DAT_EVD_HANDLE async2 = NULL;
	CHECK_RET(dat_ia_query(ia, &async2, DAT_IA_FIELD_ALL, &ia_attr, DAT_PROVIDER_FIELD_ALL,
			       &pr_attr),
		  DAT_SUCCESS);
	CHECK(async2 == async_evd);
	CHECK(!strcmp(ia_attr.vendor_name, "datfabric"));
	CHECK(ia_attr.adapter_name[0] != '\0');
	CHECK(ia_attr.max_eps > 0 && ia_attr.max_dto_per_ep >= 16 && ia_attr.max_evd_qlen > 0);
	CHECK(ia_attr.ia_address_ptr && ia_attr.ia_address_ptr->sa_family == AF_INET);
	CHECK(!strcmp(pr_attr.provider_name, name));
	CHECK(pr_attr.is_thread_safe == DAT_THREADSAFE); /* the dat.conf line it was opened by */
	CHECK(pr_attr.max_private_data_size >= 64);
	CHECK(pr_attr.optimal_buffer_alignment && 256 % pr_attr.optimal_buffer_alignment == 0);
}

static void check_software_events(DAT_EVD_HANDLE evd)
{
	DAT_EVENT ev, se;
	DAT_COUNT nmore = -1;
	int marks[3];
	CHECK_RET(dat_evd_dequeue(evd, &ev), DAT_QUEUE_EMPTY);
	CHECK_RET(dat_evd_wait(evd, 20000, 1, &ev, &nmore), ERR(DAT_TIMEOUT_EXPIRED, 0));
	CHECK(nmore == 0);
	CHECK_RET(dat_evd_wait(evd, 0, 9, &ev, &nmore), ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3));
	CHECK_RET(dat_evd_wait(evd, 0, 0, &ev, &nmore), ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3));
	for (int i = 0; i < 3; i++) {
		se = software_event(&marks[i]);
		CHECK_RET(dat_evd_post_se(evd, &se), DAT_SUCCESS);
	}
	CHECK_RET(dat_evd_wait(evd, DAT_TIMEOUT_INFINITE, 3, &ev, &nmore), DAT_SUCCESS);
	CHECK(ev.event_number == DAT_SOFTWARE_EVENT && ev.evd_handle == evd);
	CHECK(ev.event_data.software_event_data.pointer == &marks[0]);
	CHECK(nmore == 2);
	for (int i = 1; i < 3; i++) { /* in the order they were posted */
		CHECK_RET(dat_evd_dequeue(evd, &ev), DAT_SUCCESS);
		CHECK(ev.event_data.software_event_data.pointer == &marks[i]);
	}
	CHECK_RET(dat_evd_dequeue(evd, &ev), DAT_QUEUE_EMPTY);
	se = software_event(NULL);
	se.event_number = DAT_DTO_COMPLETION_EVENT;
	CHECK_RET(dat_evd_post_se(evd, &se), ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2));
}

/* A wait blocked in another thread wakes for an event posted later, and for set_unwaitable. */
/* A CNO wakes its waiter with the EVD that got an event; refused while EVDs use it. */
static void check_cno(DAT_IA_HANDLE ia)
{
	DAT_CNO_HANDLE cno;
	DAT_EVD_HANDLE a, b, got = NULL;
	DAT_EVENT ev = software_event(&got), out;
	DAT_CNO_PARAM p;
	CHECK_RET(dat_cno_create(ia, DAT_OS_WAIT_PROXY_AGENT_NULL, &cno), DAT_SUCCESS);
	CHECK_RET(dat_cno_query(cno, DAT_CNO_FIELD_ALL, &p), DAT_SUCCESS);
	CHECK(p.ia_handle != NULL); /* the provider's IA: libdat2 hands programs its own handle */
	CHECK_RET(dat_evd_create(ia, 4, cno, DAT_EVD_SOFTWARE_FLAG, &a), DAT_SUCCESS);
	CHECK_RET(dat_evd_create(ia, 4, cno, DAT_EVD_SOFTWARE_FLAG, &b), DAT_SUCCESS);
	CHECK_RET(dat_cno_wait(cno, 20000, &got), ERR(DAT_TIMEOUT_EXPIRED, 0));
	CHECK_RET(dat_evd_post_se(b, &ev), DAT_SUCCESS);
	CHECK_RET(dat_cno_wait(cno, DAT_TIMEOUT_INFINITE, &got), DAT_SUCCESS);
	CHECK(got == b);
	CHECK_RET(dat_evd_dequeue(b, &out), DAT_SUCCESS);
	CHECK_RET(dat_cno_free(cno), ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_CNO_IN_USE));
	CHECK_RET(dat_evd_free(a), DAT_SUCCESS);
	CHECK_RET(dat_evd_free(b), DAT_SUCCESS);
	CHECK_RET(dat_cno_wait(NULL, 0, &got), ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_CNO));
	CHECK_RET(dat_cno_free(cno), DAT_SUCCESS);
}

static void check_blocking(DAT_EVD_HANDLE evd)
{
	int mark;
	struct waiter w = { .evd = evd, .timeout = 5000000 };
	pthread_t t;
	pthread_create(&t, NULL, wait_thread, &w);
	usleep(50000);
	DAT_EVENT se = software_event(&mark), ev;
	DAT_COUNT nmore;
	CHECK_RET(dat_evd_dequeue(evd, &ev), ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_WAITER));
	CHECK_RET(dat_evd_free(evd), ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_IN_USE));
	CHECK_RET(dat_evd_post_se(evd, &se), DAT_SUCCESS);
	pthread_join(t, NULL);
	CHECK_RET(w.ret, DAT_SUCCESS);
	CHECK(w.event.event_data.software_event_data.pointer == &mark);

	w.timeout = DAT_TIMEOUT_INFINITE;
	pthread_create(&t, NULL, wait_thread, &w);
	usleep(50000);
	CHECK_RET(dat_evd_set_unwaitable(evd), DAT_SUCCESS);
	pthread_join(t, NULL);
	CHECK_RET(w.ret, ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_UNWAITABLE));
	CHECK_RET(dat_evd_wait(evd, 0, 1, &ev, &nmore),
		  ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_UNWAITABLE));
	CHECK_RET(dat_evd_clear_unwaitable(evd), DAT_SUCCESS);
	CHECK_RET(dat_evd_wait(evd, 0, 1, &ev, &nmore), ERR(DAT_TIMEOUT_EXPIRED, 0));
}

static void check_handles(DAT_IA_HANDLE ia, DAT_PZ_HANDLE pz, DAT_EVD_HANDLE evd)
{
	DAT_HANDLE_TYPE type;
	DAT_CONTEXT ctx = { .as_64 = 0x1234567890abcdefULL }, back = { .as_64 = 0 };
	CHECK_RET(dat_get_handle_type(evd, &type), DAT_SUCCESS);
	CHECK(type == DAT_HANDLE_TYPE_EVD);
	CHECK_RET(dat_get_handle_type(pz, &type), DAT_SUCCESS);
	CHECK(type == DAT_HANDLE_TYPE_PZ);
	CHECK_RET(dat_set_consumer_context(pz, ctx), DAT_SUCCESS);
	CHECK_RET(dat_get_consumer_context(pz, &back), DAT_SUCCESS);
	CHECK(back.as_64 == ctx.as_64);
	DAT_PZ_PARAM pp;
	CHECK_RET(dat_pz_query(pz, DAT_PZ_FIELD_ALL, &pp), DAT_SUCCESS);
	DAT_EVD_PARAM ep;
	CHECK_RET(dat_evd_query(evd, DAT_EVD_FIELD_ALL, &ep), DAT_SUCCESS);
	CHECK(ep.evd_qlen == 8 && ep.evd_flags == DAT_EVD_SOFTWARE_FLAG);
	(void)ia;
}

static int daemon_dies(DAT_IA_HANDLE ia, DAT_EVD_HANDLE async_evd, DAT_EVD_HANDLE evd)
{
	DAT_EVENT ev;
	DAT_COUNT nmore;
	int mark;
	/* An event the daemon queued before it died is still the consumer's to dequeue. */
	DAT_EVD_HANDLE queued;
	CHECK_RET(dat_evd_create(ia, 4, DAT_HANDLE_NULL, DAT_EVD_SOFTWARE_FLAG, &queued),
		  DAT_SUCCESS);
	DAT_EVENT se = software_event(&mark);
	CHECK_RET(dat_evd_post_se(queued, &se), DAT_SUCCESS);
	printf("WAITING\n");
	fflush(stdout);
	CHECK_RET(dat_evd_wait(evd, 30000000, 1, &ev, &nmore), ERR(DAT_ABORT, 0));
	CHECK_RET(dat_evd_wait(async_evd, 1000000, 1, &ev, &nmore), DAT_SUCCESS);
	CHECK(ev.event_number == DAT_ASYNC_ERROR_IA_CATASTROPHIC);
	CHECK_RET(dat_evd_dequeue(async_evd, &ev), DAT_QUEUE_EMPTY);
	CHECK_RET(dat_evd_dequeue(queued, &ev), DAT_SUCCESS);
	CHECK(ev.event_number == DAT_SOFTWARE_EVENT &&
	      ev.event_data.software_event_data.pointer == &mark);
	CHECK_RET(dat_evd_dequeue(queued, &ev), DAT_QUEUE_EMPTY);
	DAT_PZ_HANDLE pz;
	CHECK_RET(dat_pz_create(ia, &pz), ERR(DAT_ABORT, 0));
	CHECK_RET(dat_ia_close(ia, DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS);
	printf(failures ? "FAILED\n" : "PASSED\n");
	return failures ? 1 : 0;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s IA_NAME [daemon-dies]\n", argv[0]);
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	DAT_IA_HANDLE ia;
	DAT_EVD_HANDLE async_evd = DAT_HANDLE_NULL, evd;
	DAT_PZ_HANDLE pz;
	DAT_RETURN ret = dat_ia_open(argv[1], 8, &async_evd, &ia);
	if (ret != DAT_SUCCESS) {
		printf("FAILED: dat_ia_open(%s) gave 0x%08x\n", argv[1], (unsigned)ret);
		return 1;
	}
	CHECK_RET(dat_pz_create(ia, &pz), DAT_SUCCESS);
	CHECK_RET(dat_evd_create(ia, 8, DAT_HANDLE_NULL, DAT_EVD_SOFTWARE_FLAG, &evd), DAT_SUCCESS);
	if (argc > 2 && !strcmp(argv[2], "daemon-dies"))
		return daemon_dies(ia, async_evd, evd);
	check_queries(ia, async_evd, argv[1]);
	check_software_events(evd);
	check_blocking(evd);
	check_cno(ia);
	check_handles(ia, pz, evd);
	CHECK_RET(dat_evd_create(ia, 0, DAT_HANDLE_NULL, DAT_EVD_SOFTWARE_FLAG, &evd),
		  ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2));
	CHECK_RET(dat_ia_close(ia, DAT_CLOSE_GRACEFUL_FLAG),
		  ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_IA_IN_USE));
	CHECK_RET(dat_evd_free(async_evd), ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_IN_USE));
	CHECK_RET(dat_evd_free(evd), DAT_SUCCESS);
	CHECK_RET(dat_pz_free(pz), DAT_SUCCESS);
	CHECK_RET(dat_ia_close(ia, DAT_CLOSE_GRACEFUL_FLAG), DAT_SUCCESS);
	printf(failures ? "FAILED\n" : "PASSED\n");
	return failures ? 1 : 0;
}
