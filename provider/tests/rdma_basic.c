/* Registered memory, memory windows and the four posts through libdat2, between two IAs of
 * one program connected over the fabric.
 *
 * usage: rdma_basic IA_NAME
 * The memory is the program's own: malloc'd at an odd address, on the stack, static, and a
 * shared mapping registered SHARED_VIRTUAL. Prints
 * "PASSED" and exits 0 when every check holds; each failed check prints its line. */
#define _GNU_SOURCE
#include <dat2/udat.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "check.h"

#define CONN_QUAL 4711
#define WAIT_US (20 * 1000 * 1000)
#define ALL_PRIVS (DAT_MEM_PRIV_LOCAL_READ_FLAG | DAT_MEM_PRIV_LOCAL_WRITE_FLAG | \
		   DAT_MEM_PRIV_REMOTE_READ_FLAG | DAT_MEM_PRIV_REMOTE_WRITE_FLAG)

static char static_buf[4096];

/* One side: an IA, its PZ, EVDs, an EP and one registered buffer. */
struct side {
	DAT_IA_HANDLE ia;
	DAT_EVD_HANDLE async_evd, conn_evd, dto_evd, cr_evd;
	DAT_PZ_HANDLE pz;
	DAT_EP_HANDLE ep;
	char *buf;
	DAT_VLEN len;
	DAT_LMR_HANDLE lmr;
	DAT_LMR_CONTEXT lmr_context;
	DAT_RMR_CONTEXT rmr_context;
	DAT_VADDR address;
	char *shared; /* a shared mapping, registered SHARED_VIRTUAL */
	DAT_LMR_HANDLE shared_lmr;
	DAT_RMR_CONTEXT shared_rmr;
};

static void open_side(struct side *s, char *name, char *buf, DAT_VLEN len)
{
	memset(s, 0, sizeof(*s));
	CHECK_RET(dat_ia_open(name, 8, &s->async_evd, &s->ia), DAT_SUCCESS);
	CHECK_RET(dat_pz_create(s->ia, &s->pz), DAT_SUCCESS);
	CHECK_RET(dat_evd_create(s->ia, 8, DAT_HANDLE_NULL, DAT_EVD_CONNECTION_FLAG, &s->conn_evd),
		  DAT_SUCCESS);
	CHECK_RET(dat_evd_create(s->ia, 8, DAT_HANDLE_NULL, DAT_EVD_CR_FLAG, &s->cr_evd),
		  DAT_SUCCESS);
	CHECK_RET(dat_evd_create(s->ia, 32, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG | DAT_EVD_RMR_BIND_FLAG,
				 &s->dto_evd),
		  DAT_SUCCESS);
	CHECK_RET(dat_ep_create(s->ia, s->pz, s->dto_evd, s->dto_evd, s->conn_evd, NULL, &s->ep),
		  DAT_SUCCESS);
	DAT_REGION_DESCRIPTION region = {.for_va = buf};
	DAT_VLEN size = 0;
	s->buf = buf;
	s->len = len;
	CHECK_RET(dat_lmr_create(s->ia, DAT_MEM_TYPE_VIRTUAL, region, len, s->pz, ALL_PRIVS,
				 DAT_VA_TYPE_VA, &s->lmr, &s->lmr_context, &s->rmr_context, &size,
				 &s->address),
		  DAT_SUCCESS);
	CHECK(size == len && s->address == (DAT_VADDR)(uintptr_t)buf);
}

static void close_side(struct side *s)
{
	if (s->shared_lmr)
		CHECK_RET(dat_lmr_free(s->shared_lmr), DAT_SUCCESS);
	if (s->shared)
		munmap(s->shared, 4096);
	CHECK_RET(dat_ep_free(s->ep), DAT_SUCCESS);
	CHECK_RET(dat_lmr_free(s->lmr), DAT_SUCCESS);
	CHECK_RET(dat_evd_free(s->dto_evd), DAT_SUCCESS);
	CHECK_RET(dat_evd_free(s->cr_evd), DAT_SUCCESS);
	CHECK_RET(dat_evd_free(s->conn_evd), DAT_SUCCESS);
	CHECK_RET(dat_pz_free(s->pz), DAT_SUCCESS);
	CHECK_RET(dat_ia_close(s->ia, DAT_CLOSE_GRACEFUL_FLAG), DAT_SUCCESS);
}

static DAT_EVENT wait_event(DAT_EVD_HANDLE evd, DAT_EVENT_NUMBER want)
{
	DAT_EVENT ev;
	DAT_COUNT nmore;
	memset(&ev, 0, sizeof(ev));
	CHECK_RET(dat_evd_wait(evd, WAIT_US, 1, &ev, &nmore), DAT_SUCCESS);
	if (ev.event_number != want)
		printf("FAILED: event 0x%x, not 0x%x\n", (unsigned)ev.event_number, (unsigned)want);
	CHECK(ev.event_number == want);
	return ev;
}

/* A DTO completion on ``evd``: its status, cookie and length. */
static void wait_dto(DAT_EVD_HANDLE evd, DAT_DTO_COMPLETION_STATUS status, uint64_t cookie,
		     DAT_COUNT length)
{
	DAT_EVENT ev = wait_event(evd, DAT_DTO_COMPLETION_EVENT);
	const DAT_DTO_COMPLETION_EVENT_DATA *d = &ev.event_data.dto_completion_event_data;
	CHECK(d->status == status);
	CHECK(d->user_cookie.as_64 == cookie);
	if (status == DAT_DTO_SUCCESS)
		CHECK(d->transfered_length == (DAT_VLEN)length);
}

/* The next event on ``evd``, taken as a polling program takes it: dat_evd_dequeue in a loop. */
static DAT_EVENT poll_event(DAT_EVD_HANDLE evd)
{
	DAT_EVENT ev;
	DAT_RETURN ret = DAT_QUEUE_EMPTY;
	time_t give_up = time(NULL) + WAIT_US / 1000000;
	memset(&ev, 0, sizeof(ev));
	while (ret == DAT_QUEUE_EMPTY && time(NULL) < give_up)
		ret = dat_evd_dequeue(evd, &ev);
	CHECK_RET(ret, DAT_SUCCESS);
	return ev;
}

/* LMRs over the program's own memory, and the arguments dat_lmr_create refuses. */
static void check_lmrs(struct side *s)
{
	char stack_buf[100];
	DAT_LMR_HANDLE lmr, alias;
	DAT_LMR_CONTEXT lctx;
	DAT_RMR_CONTEXT rctx;
	DAT_VLEN size;
	DAT_VADDR addr;
	DAT_REGION_DESCRIPTION region = {.for_va = stack_buf + 1};
	CHECK_RET(dat_lmr_create(s->ia, DAT_MEM_TYPE_VIRTUAL, region, 77, s->pz,
				 DAT_MEM_PRIV_LOCAL_READ_FLAG, DAT_VA_TYPE_VA, &lmr, &lctx, &rctx,
				 &size, &addr),
		  DAT_SUCCESS);
	DAT_LMR_PARAM p;
	CHECK_RET(dat_lmr_query(lmr, DAT_LMR_FIELD_ALL, &p), DAT_SUCCESS);
	CHECK(p.ia_handle != NULL && p.pz_handle == s->pz && p.mem_type == DAT_MEM_TYPE_VIRTUAL);
	CHECK(p.region_desc.for_va == stack_buf + 1 && p.length == 77 && p.lmr_context == lctx);
	CHECK(p.rmr_context == rctx && p.registered_size == 77);
	CHECK(p.registered_address == (DAT_VADDR)(uintptr_t)(stack_buf + 1));
	CHECK(p.mem_priv == DAT_MEM_PRIV_LOCAL_READ_FLAG);
	region.for_lmr_handle = lmr;
	CHECK_RET(dat_lmr_create(s->ia, DAT_MEM_TYPE_LMR, region, 0, s->pz, ALL_PRIVS,
				 DAT_VA_TYPE_VA, &alias, &lctx, &rctx, &size, &addr),
		  DAT_SUCCESS);
	CHECK(size == 77 && addr == (DAT_VADDR)(uintptr_t)(stack_buf + 1));
	CHECK_RET(dat_lmr_free(alias), DAT_SUCCESS);
	CHECK_RET(dat_lmr_free(lmr), DAT_SUCCESS);
	CHECK_RET(dat_lmr_free(NULL), ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_LMR));
	region.for_va = static_buf;
	CHECK_RET(dat_lmr_create(s->ia, DAT_MEM_TYPE_VIRTUAL, region, sizeof(static_buf), NULL,
				 ALL_PRIVS, DAT_VA_TYPE_VA, &lmr, &lctx, &rctx, &size, &addr),
		  ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_PZ));
	region.for_va = (void *)(uintptr_t)4096; /* nothing is mapped there */
	CHECK_RET(dat_lmr_create(s->ia, DAT_MEM_TYPE_VIRTUAL, region, 4096, s->pz, ALL_PRIVS,
				 DAT_VA_TYPE_VA, &lmr, &lctx, &rctx, &size, &addr),
		  ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3));
	static char cookie[DAT_LMR_COOKIE_SIZE] = "rdma_basic's shared memory";
	s->shared = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	CHECK(s->shared != MAP_FAILED);
	region.for_shared_memory.virtual_address = s->shared;
	region.for_shared_memory.shared_memory_id = NULL;
	CHECK_RET(dat_lmr_create(s->ia, DAT_MEM_TYPE_SHARED_VIRTUAL, region, 4096, s->pz, ALL_PRIVS,
				 DAT_VA_TYPE_VA, &lmr, &lctx, &rctx, &size, &addr),
		  ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3));
	region.for_shared_memory.shared_memory_id = &cookie;
	CHECK_RET(dat_lmr_create(s->ia, DAT_MEM_TYPE_SHARED_VIRTUAL, region, 4096, s->pz, ALL_PRIVS,
				 DAT_VA_TYPE_VA, &s->shared_lmr, &lctx, &s->shared_rmr, &size, &addr),
		  DAT_SUCCESS);
	CHECK(addr == (DAT_VADDR)(uintptr_t)s->shared && size == 4096);
	CHECK_RET(dat_lmr_query(s->shared_lmr, DAT_LMR_FIELD_ALL, &p), DAT_SUCCESS);
	CHECK(p.mem_type == DAT_MEM_TYPE_SHARED_VIRTUAL);
	DAT_LMR_TRIPLET t = {s->address, 16, s->lmr_context};
	CHECK_RET(dat_lmr_sync_rdma_write(s->ia, &t, 1), DAT_SUCCESS);
	t.segment_length = (DAT_SEG_LENGTH)s->len + 1;
	CHECK_RET(dat_lmr_sync_rdma_read(s->ia, &t, 1), ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2));
}

/* What the posts refuse before anything is queued (the EP is not connected yet). */
static void check_post_errors(struct side *s)
{
	DAT_LMR_TRIPLET iov = {s->address, 8, s->lmr_context};
	DAT_DTO_COOKIE c = {.as_64 = 1};
	DAT_RMR_TRIPLET remote = {s->address, 8, s->rmr_context};
	DAT_EP_HANDLE ep = s->ep;
	CHECK_RET(dat_ep_post_send(ep, 1, &iov, c, DAT_COMPLETION_DEFAULT_FLAG),
		  ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_UNCONNECTED));
	CHECK_RET(dat_ep_post_rdma_write(ep, 1, &iov, c, &remote, DAT_COMPLETION_DEFAULT_FLAG),
		  ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_UNCONNECTED));
	CHECK_RET(dat_ep_post_recv(ep, -1, &iov, c, DAT_COMPLETION_DEFAULT_FLAG),
		  ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2));
	CHECK_RET(dat_ep_post_recv(ep, 1, &iov, c, DAT_COMPLETION_SUPPRESS_FLAG),
		  ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG5));
	CHECK_RET(dat_ep_post_recv(ep, 1, &iov, c, 0x100), ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG5));
	iov.lmr_context ^= 0x5a5a;
	CHECK_RET(dat_ep_post_recv(ep, 1, &iov, c, DAT_COMPLETION_DEFAULT_FLAG),
		  ERR(DAT_PRIVILEGES_VIOLATION, 0));
	iov.lmr_context = s->lmr_context;
	iov.virtual_address = s->address + s->len - 4;
	CHECK_RET(dat_ep_post_recv(ep, 1, &iov, c, DAT_COMPLETION_DEFAULT_FLAG),
		  ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3));
	CHECK_RET(dat_ep_post_send(NULL, 1, &iov, c, DAT_COMPLETION_DEFAULT_FLAG),
		  ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP));
}

/* b connects to a's PSP; a accepts; both see ESTABLISHED. */
static void connect_sides(struct side *a, struct side *b)
{
	DAT_IA_ATTR attr;
	DAT_PSP_HANDLE psp;
	CHECK_RET(dat_ia_query(a->ia, NULL, DAT_IA_FIELD_ALL, &attr, 0, NULL), DAT_SUCCESS);
	CHECK_RET(dat_psp_create(a->ia, CONN_QUAL, a->cr_evd, DAT_PSP_CONSUMER_FLAG, &psp),
		  DAT_SUCCESS);
	CHECK_RET(dat_ep_connect(b->ep, attr.ia_address_ptr, CONN_QUAL, WAIT_US, 0, NULL,
				 DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG),
		  DAT_SUCCESS);
	DAT_EVENT ev = wait_event(a->cr_evd, DAT_CONNECTION_REQUEST_EVENT);
	CHECK_RET(dat_cr_accept(ev.event_data.cr_arrival_event_data.cr_handle, a->ep, 0, NULL),
		  DAT_SUCCESS);
	wait_event(b->conn_evd, DAT_CONNECTION_EVENT_ESTABLISHED);
	wait_event(a->conn_evd, DAT_CONNECTION_EVENT_ESTABLISHED);
	CHECK_RET(dat_psp_free(psp), DAT_SUCCESS);
}

/* Send/receive, an RMR bound over a's buffer, then an RDMA Write and Read by b through it. */
static void check_traffic(struct side *a, struct side *b)
{
	DAT_DTO_COOKIE c = {.as_64 = 0x1234};
	DAT_LMR_TRIPLET recv_iov = {a->address, 64, a->lmr_context};
	CHECK_RET(dat_ep_post_recv(a->ep, 1, &recv_iov, c, DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
	strcpy(b->buf, "hello over the fabric");
	DAT_LMR_TRIPLET send_iov[2] = {{b->address, 6, b->lmr_context},
				       {b->address + 6, 16, b->lmr_context}};
	c.as_64 = 0x55;
	CHECK_RET(dat_ep_post_send(b->ep, 2, send_iov, c, DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
	wait_dto(b->dto_evd, DAT_DTO_SUCCESS, 0x55, 22);
	wait_dto(a->dto_evd, DAT_DTO_SUCCESS, 0x1234, 22);
	CHECK(!strcmp(a->buf, "hello over the fabric"));

	DAT_RMR_HANDLE rmr;
	DAT_RMR_CONTEXT window;
	DAT_RMR_COOKIE rc = {.as_64 = 0x77};
	DAT_LMR_TRIPLET range = {a->address + 1024, 2048, a->lmr_context};
	CHECK_RET(dat_rmr_create(a->pz, &rmr), DAT_SUCCESS);
	CHECK_RET(dat_rmr_bind(rmr, a->lmr, &range,
			       DAT_MEM_PRIV_REMOTE_READ_FLAG | DAT_MEM_PRIV_REMOTE_WRITE_FLAG,
			       DAT_VA_TYPE_VA, a->ep, rc, DAT_COMPLETION_DEFAULT_FLAG, &window),
		  DAT_SUCCESS);
	DAT_EVENT ev = wait_event(a->dto_evd, DAT_RMR_BIND_COMPLETION_EVENT);
	CHECK(ev.event_data.rmr_completion_event_data.rmr_handle == rmr);
	CHECK(ev.event_data.rmr_completion_event_data.status == DAT_RMR_BIND_SUCCESS);
	DAT_RMR_PARAM rp;
	CHECK_RET(dat_rmr_query(rmr, DAT_RMR_FIELD_ALL, &rp), DAT_SUCCESS);
	CHECK(rp.rmr_context == window && rp.pz_handle == a->pz && rp.lmr_triplet.segment_length == 2048);

	for (int i = 0; i < 1000; i++)
		b->buf[100 + i] = (char)(i * 7);
	DAT_LMR_TRIPLET src = {b->address + 100, 1000, b->lmr_context};
	DAT_RMR_TRIPLET dst = {a->address + 1024 + 8, 1000, window};
	c.as_64 = 0x66;
	CHECK_RET(dat_ep_post_rdma_write(b->ep, 1, &src, c, &dst, DAT_COMPLETION_DEFAULT_FLAG),
		  DAT_SUCCESS);
	wait_dto(b->dto_evd, DAT_DTO_SUCCESS, 0x66, 1000);
	CHECK(!memcmp(a->buf + 1024 + 8, b->buf + 100, 1000));
	dst.segment_length = 999;
	CHECK_RET(dat_ep_post_rdma_write(b->ep, 1, &src, c, &dst, DAT_COMPLETION_DEFAULT_FLAG),
		  ERR(DAT_LENGTH_ERROR, 0));

	memset(a->buf + 1024, 0x3c, 512);
	DAT_LMR_TRIPLET into = {b->address + 2048, 512, b->lmr_context};
	DAT_RMR_TRIPLET from = {a->address + 1024, 512, window};
	c.as_64 = 0x67;
	CHECK_RET(dat_ep_post_rdma_read(b->ep, 1, &into, c, &from, DAT_COMPLETION_DEFAULT_FLAG),
		  DAT_SUCCESS);
	wait_dto(b->dto_evd, DAT_DTO_SUCCESS, 0x67, 512);
	CHECK(!memcmp(b->buf + 2048, a->buf + 1024, 512));

	/* into a's shared mapping (SHARED_VIRTUAL), through the LMR's own rmr_context */
	DAT_RMR_TRIPLET shared = {(DAT_VADDR)(uintptr_t)a->shared + 16, 100, a->shared_rmr};
	src.segment_length = 100;
	c.as_64 = 0x69;
	CHECK_RET(dat_ep_post_rdma_write(b->ep, 1, &src, c, &shared, DAT_COMPLETION_DEFAULT_FLAG),
		  DAT_SUCCESS);
	wait_dto(b->dto_evd, DAT_DTO_SUCCESS, 0x69, 100);
	CHECK(!memcmp(a->shared + 16, b->buf + 100, 100));

	/* a fenced Write carries the bytes a Read posted before it brought in, not those there
	 * when it was posted (a fenced request is never staged) */
	memset(a->buf + 1024, 0x5a, 512);
	memset(b->buf + 3072, 0, 512);
	DAT_LMR_TRIPLET fetched = {b->address + 3072, 512, b->lmr_context};
	DAT_RMR_TRIPLET back = {a->address + 2560, 512, window};
	c.as_64 = 0x6a;
	CHECK_RET(dat_ep_post_rdma_read(b->ep, 1, &fetched, c, &from, DAT_COMPLETION_DEFAULT_FLAG),
		  DAT_SUCCESS);
	c.as_64 = 0x6b;
	CHECK_RET(dat_ep_post_rdma_write(b->ep, 1, &fetched, c, &back,
					 DAT_COMPLETION_BARRIER_FENCE_FLAG),
		  DAT_SUCCESS);
	wait_dto(b->dto_evd, DAT_DTO_SUCCESS, 0x6a, 512);
	wait_dto(b->dto_evd, DAT_DTO_SUCCESS, 0x6b, 512);
	CHECK(!memcmp(a->buf + 2560, a->buf + 1024, 512));

	/* 600 Writes of 8000 bytes: the staging area (4 MiB) wraps, and every one lands as posted */
	DAT_LMR_TRIPLET chunk = {b->address, 8000, b->lmr_context};
	DAT_RMR_TRIPLET whole = {a->address, 8000, a->rmr_context};
	for (int i = 0; i < 600 && !failures; i++) {
		memset(b->buf, (char)i, 8000);
		c.as_64 = 0x1000u + (uint64_t)i;
		CHECK_RET(dat_ep_post_rdma_write(b->ep, 1, &chunk, c, &whole,
						 DAT_COMPLETION_DEFAULT_FLAG),
			  DAT_SUCCESS);
		wait_dto(b->dto_evd, DAT_DTO_SUCCESS, c.as_64, 8000);
		CHECK(!memcmp(a->buf, b->buf, 8000));
	}

	/* Bulk Writes taken by polling: once the EVD's completions average DF_POLL_BULK bytes, an
	 * empty dequeue naps at once (armed); every completion still comes, once and in order */
	DAT_LMR_TRIPLET half = {b->address, 32000, b->lmr_context};
	for (int i = 0; i < 40 && !failures; i++) {
		for (uint64_t k = 0; k < 2; k++) {
			memset(b->buf + k * 32768, (char)(i * 2 + (int)k), 32768);
			half.virtual_address = b->address + k * 32768;
			DAT_RMR_TRIPLET part = {a->address + k * 32768, 32000, a->rmr_context};
			c.as_64 = 0x2000u + (uint64_t)i * 2 + k;
			CHECK_RET(dat_ep_post_rdma_write(b->ep, 1, &half, c, &part,
							 DAT_COMPLETION_DEFAULT_FLAG),
				  DAT_SUCCESS);
		}
		for (uint64_t k = 0; k < 2; k++) {
			DAT_EVENT got = poll_event(b->dto_evd);
			const DAT_DTO_COMPLETION_EVENT_DATA *d = &got.event_data.dto_completion_event_data;
			CHECK(got.event_number == DAT_DTO_COMPLETION_EVENT && d->status == DAT_DTO_SUCCESS);
			CHECK(d->user_cookie.as_64 == 0x2000u + (uint64_t)i * 2 + k);
			CHECK(d->transfered_length == 32000);
		}
		CHECK(!memcmp(a->buf, b->buf, 32000) && !memcmp(a->buf + 32768, b->buf + 32768, 32000));
	}
	DAT_EVENT none;
	CHECK_RET(dat_evd_dequeue(b->dto_evd, &none), DAT_QUEUE_EMPTY); /* a nap ends */

	from.virtual_address = a->address; /* below the window: the target refuses, and the
					    * connection breaks */
	c.as_64 = 0x68;
	CHECK_RET(dat_ep_post_rdma_read(b->ep, 1, &into, c, &from, DAT_COMPLETION_DEFAULT_FLAG),
		  DAT_SUCCESS);
	DAT_EVENT bad = wait_event(b->dto_evd, DAT_DTO_COMPLETION_EVENT);
	CHECK(bad.event_data.dto_completion_event_data.status != DAT_DTO_SUCCESS);
	CHECK_RET(dat_rmr_free(rmr), DAT_SUCCESS);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s IA_NAME\n", argv[0]);
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	char *raw_a = malloc(65536 + 3), *raw_b = malloc(65536);
	struct side a, b;
	open_side(&a, argv[1], raw_a + 3, 65536); /* any alignment */
	open_side(&b, argv[1], raw_b, 65536);
	if (failures) {
		printf("FAILED\n");
		return 1;
	}
	check_lmrs(&a);
	check_post_errors(&a);
	connect_sides(&a, &b);
	if (!failures)
		check_traffic(&a, &b);
	/* the refused Read broke the connection: both sides are told */
	wait_event(b.conn_evd, DAT_CONNECTION_EVENT_BROKEN);
	wait_event(a.conn_evd, DAT_CONNECTION_EVENT_BROKEN);
	close_side(&a);
	close_side(&b);
	free(raw_a);
	free(raw_b);
	printf(failures ? "FAILED\n" : "PASSED\n");
	return failures ? 1 : 0;
}
