/* What one small RDMA Write (or Send) costs a C consumer in libdatfabric: the CPU time inside
 * dat_ep_post_rdma_write (dat_ep_post_send) and inside the dat_evd_dequeue that returns its
 * completion, with ``window`` requests in flight and the program polling, as perftest's put_bw
 * (send_bw) does.
 *
 *   post_reap IA_TARGET IA_INITIATOR [SIZE [WINDOW [ITERS [OP [CQ_MOD]]]]]
 *             (defaults 64, 64, 100000, write, 1; OP is write or send)
 *
 * CQ_MOD is perftest's CQ moderation: one request in CQ_MOD (at most WINDOW) and the last are
 * posted signalled, the others with DAT_COMPLETION_SUPPRESS_FLAG; the EP completes its
 * requests in order, so a signalled completion retires every request up to its cookie.
 *
 * For Sends the same program is the receiver too: IA_TARGET's EP holds ``window`` receives
 * (one buffer, as perftest's), each reposted as its completion is reaped, and a Send is posted
 * only while a receive is there for it (no RNR). The reaping of receives is not timed.
 *
 * Each call is timed by the thread's CPU clock (CLOCK_THREAD_CPUTIME_ID: time asleep in a
 * dequeue's nap is not counted, its system calls are), less the cost of reading that clock
 * (measured first). The program's CPU per operation (getrusage over the timed loop) counts the
 * empty dequeues too (a polling program spends its idle time there) and these clock reads, a
 * system call each: that figure and the rate are a little pessimistic. Each completion is
 * reaped alone (perftest polls in batches); with CQ_MOD 1 every request is signalled.
 * Prints "timing N operations" as the timed loop begins, then the figures, then PASSED. */
#define _POSIX_C_SOURCE 200809L
#include <stdbool.h>
#include <sys/resource.h>
#include <time.h>

#include "../tests/data_side.h"

#define QUAL 0x5157

static double clock_us(clockid_t clock)
{
	struct timespec t;
	clock_gettime(clock, &t);
	return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static double now_us(void)
{
	return clock_us(CLOCK_MONOTONIC);
}

static double thread_us(void)
{
	return clock_us(CLOCK_THREAD_CPUTIME_ID);
}

/* What one read of the thread's CPU clock adds to a call timed between two of them. */
static double clock_cost_us(void)
{
	double t = thread_us();
	for (int i = 0; i < 10000; i++)
		(void)thread_us();
	return (thread_us() - t) / 10001;
}

static double cpu_us(void)
{
	struct rusage u;
	getrusage(RUSAGE_SELF, &u);
	return (double)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e6 +
	       (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

/* An EP of ``s`` whose DTOs complete on ``dto`` and that holds ``window`` requests and as
 * many receives. */
static DAT_EP_HANDLE make_ep(const struct base *s, DAT_EVD_HANDLE dto, DAT_COUNT window)
{
	DAT_EP_HANDLE ep = DAT_HANDLE_NULL;
	DAT_EP_PARAM param;
	CHECK_RET(dat_ep_create(s->ia, s->pz, dto, dto, s->conn_evd, NULL, &ep), DAT_SUCCESS);
	CHECK_RET(dat_ep_query(ep, DAT_EP_FIELD_ALL, &param), DAT_SUCCESS);
	CHECK_RET(dat_ep_free(ep), DAT_SUCCESS);
	param.ep_attr.max_request_dtos = window;
	param.ep_attr.max_recv_dtos = window;
	CHECK_RET(dat_ep_create(s->ia, s->pz, dto, dto, s->conn_evd, &param.ep_attr, &ep),
		  DAT_SUCCESS);
	return ep;
}

struct run {
	double post_us, reap_us, wall_us, cpu_us;
	long empties, reaped; /* empty dequeues; completions taken */
};

static double clock_cost;

/* The receiving side of Sends: its EP, the EVD its receives complete on, the buffer they
 * share, and how many of them completed (NULL ``ep``: the run is of RDMA Writes). */
struct sink {
	DAT_EP_HANDLE ep;
	DAT_EVD_HANDLE evd;
	DAT_LMR_TRIPLET iov;
	long received;
};

static void post_recv(struct sink *s)
{
	DAT_DTO_COOKIE cookie = { .as_64 = 0 };
	CHECK_RET(dat_ep_post_recv(s->ep, 1, &s->iov, cookie, DAT_COMPLETION_DEFAULT_FLAG),
		  DAT_SUCCESS);
}

/* Take the receives that completed, each reposted at once. */
static void reap_recvs(struct sink *s)
{
	DAT_EVENT ev;
	while (dat_evd_dequeue(s->evd, &ev) == DAT_SUCCESS) {
		CHECK(ev.event_data.dto_completion_event_data.status == DAT_DTO_SUCCESS);
		s->received++;
		post_recv(s);
	}
}

/* ``iters`` Writes of ``iov`` to ``remote`` (Sends of ``iov`` into ``sink``'s receives when
 * ``sink`` has an EP), at most ``window`` in flight. */
static struct run requests(DAT_EP_HANDLE ep, DAT_EVD_HANDLE evd, DAT_LMR_TRIPLET *iov,
			   DAT_RMR_TRIPLET *remote, struct sink *sink, long window, long iters,
			   long cq_mod)
{
	struct run r = { 0 };
	double wall = now_us(), cpu = cpu_us();
	long posted = 0, done = 0, base = sink->received;
	while (done < iters) {
		if (sink->ep)
			reap_recvs(sink);
		/* Sends: no more in flight than receives wait for them */
		long room = sink->ep ? sink->received - base + window : iters;
		while (posted < iters && posted - done < window && posted < room) {
			double t = thread_us();
			DAT_DTO_COOKIE cookie = { .as_64 = (DAT_UINT64)posted };
			DAT_COMPLETION_FLAGS flags = (posted + 1) % cq_mod == 0 || posted == iters - 1
							     ? DAT_COMPLETION_DEFAULT_FLAG
							     : DAT_COMPLETION_SUPPRESS_FLAG;
			DAT_RETURN ret = sink->ep ? dat_ep_post_send(ep, 1, iov, cookie, flags)
						  : dat_ep_post_rdma_write(ep, 1, iov, cookie,
									   remote, flags);
			r.post_us += thread_us() - t - clock_cost;
			if (ret != DAT_SUCCESS) {
				printf("FAILED: post gave 0x%08x\n", (unsigned)ret);
				exit(1);
			}
			posted++;
		}
		DAT_EVENT ev;
		double t = thread_us();
		DAT_RETURN ret = dat_evd_dequeue(evd, &ev);
		if (ret == DAT_SUCCESS) {
			r.reap_us += thread_us() - t - clock_cost;
			CHECK(ev.event_data.dto_completion_event_data.status == DAT_DTO_SUCCESS);
			done = (long)ev.event_data.dto_completion_event_data.user_cookie.as_64 + 1;
			r.reaped++;
		} else if (ret == DAT_QUEUE_EMPTY) {
			r.empties++;
		} else {
			printf("FAILED: dequeue gave 0x%08x\n", (unsigned)ret);
			exit(1);
		}
	}
	r.wall_us = now_us() - wall;
	r.cpu_us = cpu_us() - cpu;
	return r;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: %s IA_TARGET IA_INITIATOR [SIZE [WINDOW [ITERS [OP [CQ_MOD]]]]]\n",
			argv[0]);
		return 2;
	}
	long size = argc > 3 ? atol(argv[3]) : 64;
	long window = argc > 4 ? atol(argv[4]) : 64;
	long iters = argc > 5 ? atol(argv[5]) : 100000;
	const char *op = argc > 6 ? argv[6] : "write";
	long cq_mod = argc > 7 ? atol(argv[7]) : 1;
	bool send = strcmp(op, "send") == 0;
	if (size <= 0 || window <= 0 || iters <= 0 || cq_mod <= 0 ||
	    (!send && strcmp(op, "write") != 0))
		return 2;
	if (cq_mod > window)
		cq_mod = window; /* else a window could hold no signalled request */
	setvbuf(stdout, NULL, _IOLBF, 0);
	struct base a, b;
	open_base(&a, argv[1], 0);
	open_base(&b, argv[2], 0);
	DAT_EVD_HANDLE a_evd = DAT_HANDLE_NULL, b_evd = DAT_HANDLE_NULL;
	CHECK_RET(dat_evd_create(a.ia, (DAT_COUNT)window, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &a_evd),
		  DAT_SUCCESS);
	CHECK_RET(dat_evd_create(b.ia, (DAT_COUNT)window, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &b_evd),
		  DAT_SUCCESS);
	DAT_EP_HANDLE a_ep = make_ep(&a, a_evd, (DAT_COUNT)window);
	DAT_EP_HANDLE b_ep = make_ep(&b, b_evd, (DAT_COUNT)window);
	void *a_buf = zeroed((size_t)size), *b_buf = zeroed((size_t)size);
	DAT_LMR_CONTEXT a_lctx, b_lctx;
	DAT_RMR_CONTEXT a_rctx, b_rctx;
	DAT_LMR_HANDLE a_lmr = register_va(&a, a.pz, a_buf, (DAT_VLEN)size, ALL_PRIVS, &a_lctx,
					   &a_rctx);
	DAT_LMR_HANDLE b_lmr = register_va(&b, b.pz, b_buf, (DAT_VLEN)size, ALL_PRIVS, &b_lctx,
					   &b_rctx);
	if (failures)
		return 1;
	accept_connection(&a, a_ep, &b, b_ep, QUAL);
	DAT_LMR_TRIPLET iov = { .lmr_context = b_lctx,
				.virtual_address = (DAT_VADDR)(uintptr_t)b_buf,
				.segment_length = (DAT_VLEN)size };
	DAT_RMR_TRIPLET remote = { .rmr_context = a_rctx,
				   .virtual_address = (DAT_VADDR)(uintptr_t)a_buf,
				   .segment_length = (DAT_VLEN)size };
	struct sink sink = { .ep = DAT_HANDLE_NULL };
	if (send) {
		sink = (struct sink){ .ep = a_ep, .evd = a_evd,
				      .iov = { .lmr_context = a_lctx,
					       .virtual_address = (DAT_VADDR)(uintptr_t)a_buf,
					       .segment_length = (DAT_VLEN)size } };
		for (long i = 0; i < window; i++)
			post_recv(&sink);
	}
	clock_cost = clock_cost_us();
	requests(b_ep, b_evd, &iov, &remote, &sink, window, iters / 10 + 1, cq_mod); /* warm up */
	printf("timing %ld operations\n", iters); /* bench.breakdown reads the daemons' CPU now */
	struct run r = requests(b_ep, b_evd, &iov, &remote, &sink, window, iters, cq_mod);
	printf("%ld B %s, window %ld, %ld operations: %.0f ops/s, one in %ld signalled"
	       " (%ld completions)\n",
	       size, send ? "Send" : "RDMA Write", window, iters, iters / r.wall_us * 1e6, cq_mod,
	       r.reaped);
	printf("  CPU per operation: post %.2f us, reap %.2f us (the dequeue that returns it),"
	       " sum %.2f us (clock read: %.2f us, subtracted)\n",
	       r.post_us / iters, r.reap_us / iters, (r.post_us + r.reap_us) / iters, clock_cost);
	printf("  the program's CPU per operation, empty dequeues included: %.2f us (%.1f empty dequeues)\n",
	       r.cpu_us / iters, (double)r.empties / iters);
	CHECK_RET(dat_ep_disconnect(b_ep, DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS);
	WAIT(b.conn_evd, DAT_CONNECTION_EVENT_DISCONNECTED);
	WAIT(a.conn_evd, DAT_CONNECTION_EVENT_DISCONNECTED);
	CHECK_RET(dat_ep_free(b_ep), DAT_SUCCESS);
	CHECK_RET(dat_ep_free(a_ep), DAT_SUCCESS);
	CHECK_RET(dat_lmr_free(b_lmr), DAT_SUCCESS);
	CHECK_RET(dat_lmr_free(a_lmr), DAT_SUCCESS);
	CHECK_RET(dat_evd_free(b_evd), DAT_SUCCESS);
	CHECK_RET(dat_evd_free(a_evd), DAT_SUCCESS);
	close_base(&b);
	close_base(&a);
	free(a_buf);
	free(b_buf);
	printf(failures ? "FAILED\n" : "PASSED\n");
	return failures ? 1 : 0;
}
