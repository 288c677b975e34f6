/* The IB extensions (dat_ib_extensions.h) through libdat2's dat_extension_op, between two IAs
 * of one program connected over the fabric: fetch-and-add, compare-and-swap, RDMA Write with
 * immediate data, their argument errors, and an atomic refused by memory registered without
 * DAT_IB_MEM_PRIV_REMOTE_ATOMIC.
 *
 * usage: ib_ext IA_NAME [ACTIVE_IA_NAME]
 * The passive side (the atomics' and Writes' target) opens IA_NAME, the active side
 * ACTIVE_IA_NAME (default: IA_NAME too). Prints "PASSED" and exits 0 when every check holds;
 * each failed check prints its line. */
#define _GNU_SOURCE
#include <netinet/in.h> /* before dat_ib_extensions.h: DAT_SOCK_ADDR6 */
#include <dat2/udat.h>
#include <dat2/dat_ib_extensions.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "data_side.h"

#define CONN_QUAL 4713
#define SETTLE_US (5 * 1000 * 1000)
#define BUF_LEN 65536
#define ATOMIC_PRIVS (ALL_PRIVS | DAT_IB_MEM_PRIV_REMOTE_ATOMIC)
#define WINDOW_PRIVS (DAT_MEM_PRIV_REMOTE_READ_FLAG | DAT_MEM_PRIV_REMOTE_WRITE_FLAG | \
		      DAT_IB_MEM_PRIV_REMOTE_ATOMIC)
#define DEFAULT DAT_COMPLETION_DEFAULT_FLAG

/* One side: an IA, its PZ, EVDs, an EP and its registered memory. */
struct side {
	struct base b;
	DAT_EP_HANDLE ep;
	unsigned char *buf; /* BUF_LEN bytes, registered with ATOMIC_PRIVS */
	DAT_LMR_HANDLE lmr;
	DAT_LMR_CONTEXT lmr_context;
	DAT_RMR_CONTEXT rmr_context;
	DAT_VADDR address;
	unsigned char *plain; /* 4096 bytes, registered with PRIVS only (no REMOTE_ATOMIC) */
	DAT_LMR_HANDLE plain_lmr;
	DAT_LMR_CONTEXT plain_lmr_context;
	DAT_RMR_CONTEXT plain_rmr_context;
};

static void open_side(struct side *s, char *name)
{
	memset(s, 0, sizeof(*s));
	open_base(&s->b, name, DAT_EVD_RMR_BIND_FLAG);
	CHECK_RET(dat_ep_create(s->b.ia, s->b.pz, s->b.dto_evd, s->b.dto_evd, s->b.conn_evd, NULL,
				&s->ep),
		  DAT_SUCCESS);
	s->buf = zeroed(BUF_LEN);
	s->plain = zeroed(4096);
	s->address = (DAT_VADDR)(uintptr_t)s->buf;
	s->lmr = register_va(&s->b, s->b.pz, s->buf, BUF_LEN, ATOMIC_PRIVS, &s->lmr_context,
			     &s->rmr_context);
	s->plain_lmr = register_va(&s->b, s->b.pz, s->plain, 4096, ALL_PRIVS, &s->plain_lmr_context,
				   &s->plain_rmr_context);
}

static void close_side(struct side *s)
{
	CHECK_RET(dat_ep_free(s->ep), DAT_SUCCESS);
	CHECK_RET(dat_lmr_free(s->plain_lmr), DAT_SUCCESS);
	CHECK_RET(dat_lmr_free(s->lmr), DAT_SUCCESS);
	close_base(&s->b);
	free(s->buf);
	free(s->plain);
}


/* The next event on ``evd`` is an IB extension's DTO completion: DAT_IB_DTO_EVENT of
 * ``operation`` with ``cookie`` and ``status``, its extension data of ``type`` with the status
 * that goes with ``status``. Returns the extension data; *length the transferred length. */
static DAT_IB_EXTENSION_EVENT_DATA wait_ib(DAT_EVD_HANDLE evd, DAT_IB_DTOS operation,
					   uint64_t cookie, DAT_DTO_COMPLETION_STATUS status,
					   DAT_IB_EXT_TYPE type, DAT_VLEN *length, int line)
{
	DAT_EVENT ev = wait_event_at(evd, (DAT_EVENT_NUMBER)DAT_IB_DTO_EVENT, WAIT_US, line);
	const DAT_DTO_COMPLETION_EVENT_DATA *d = &ev.event_data.dto_completion_event_data;
	DAT_IB_EXTENSION_EVENT_DATA x;
	memcpy(&x, ev.event_extension_data, sizeof(x));
	DAT_IB_STATUS want = status == DAT_DTO_SUCCESS ? DAT_OP_SUCCESS : DAT_IB_OP_ERR;
	if ((int)d->operation != (int)operation || d->user_cookie.as_64 != cookie ||
	    d->status != status || x.type != type || x.status != want) {
		printf("FAILED line %d: operation %d, cookie 0x%llx, status %d, type %d, ext status %d;"
		       " not %d, 0x%llx, %d, %d, %d\n", line, (int)d->operation,
		       (unsigned long long)d->user_cookie.as_64, (int)d->status, (int)x.type,
		       (int)x.status, (int)operation, (unsigned long long)cookie, (int)status,
		       (int)type, (int)want);
		failures++;
	}
	if (length)
		*length = d->transfered_length;
	return x;
}
#define WAIT_IB(evd, op, cookie, status, type, length) \
	wait_ib((evd), (op), (cookie), (status), (type), (length), __LINE__)

static uint64_t word_at(const unsigned char *p)
{
	uint64_t v;
	memcpy(&v, p, sizeof(v));
	return v;
}

static void set_word(unsigned char *p, uint64_t v)
{
	memcpy(p, &v, sizeof(v));
}

/* dat_ia_query: the IB extension, its version, and the operations offered by name. */
static void check_attributes(const struct side *s)
{
	DAT_IA_ATTR ia_attr;
	DAT_PROVIDER_ATTR pr_attr;
	CHECK_RET(dat_ia_query(s->b.ia, NULL, DAT_IA_FIELD_ALL, &ia_attr, DAT_PROVIDER_FIELD_ALL,
			       &pr_attr),
		  DAT_SUCCESS);
	CHECK(ia_attr.extension_supported == DAT_EXTENSION_IB);
	CHECK(ia_attr.extension_version == DAT_IB_EXTENSION_VERSION);
	const char *names[] = {DAT_IB_ATTR_FETCH_AND_ADD, DAT_IB_ATTR_CMP_AND_SWAP,
			       DAT_IB_ATTR_IMMED_DATA};
	for (size_t n = 0; n < sizeof(names) / sizeof(names[0]); n++) {
		const char *value = NULL;
		for (DAT_COUNT i = 0; i < pr_attr.num_provider_specific_attr; i++)
			if (!strcmp(pr_attr.provider_specific_attr[i].name, names[n]))
				value = pr_attr.provider_specific_attr[i].value;
		if (!value || strcmp(value, "TRUE"))
			printf("FAILED: provider attribute %s is %s\n", names[n], value ? value : "absent");
		CHECK(value && !strcmp(value, "TRUE"));
	}
}

/* Before the connection: the three are refused as the posts they are modelled on. */
static void check_unconnected(struct side *a, struct side *b)
{
	DAT_LMR_TRIPLET l = {b->address, 8, b->lmr_context};
	DAT_RMR_TRIPLET r = {a->address, 8, a->rmr_context};
	DAT_DTO_COOKIE c = {.as_64 = 1};
	DAT_RETURN unconnected = ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_UNCONNECTED);
	CHECK_RET(dat_ib_post_fetch_and_add(b->ep, 1, &l, c, &r, DEFAULT), unconnected);
	CHECK_RET(dat_ib_post_cmp_and_swap(b->ep, 0, 1, &l, c, &r, DEFAULT), unconnected);
	CHECK_RET(dat_ib_post_rdma_write_immed(b->ep, 1, &l, c, &r, 7, DEFAULT), unconnected);
}

/* Every argument error, on the connected EP b->ep: nothing is posted. */
static void check_argument_errors(struct side *a, struct side *b)
{
	DAT_LMR_TRIPLET l = {b->address, 8, b->lmr_context};
	DAT_RMR_TRIPLET r = {a->address, 8, a->rmr_context};
	DAT_DTO_COOKIE c = {.as_64 = 2};
	DAT_EP_HANDLE ep = b->ep;
	DAT_RETURN bad_ep = ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
	DAT_RETURN unsupported = ERR(DAT_MODEL_NOT_SUPPORTED, 0);
	DAT_RETURN length = ERR(DAT_LENGTH_ERROR, 0);
	DAT_RETURN privileges = ERR(DAT_PRIVILEGES_VIOLATION, 0);
#define BAD(n) ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG##n)

	/* the handle: an EP of this provider */
	CHECK_RET(dat_ib_post_fetch_and_add(b->b.pz, 1, &l, c, &r, DEFAULT), bad_ep);
	CHECK_RET(dat_ib_post_cmp_and_swap(b->b.dto_evd, 0, 1, &l, c, &r, DEFAULT), bad_ep);
	CHECK_RET(dat_ib_post_rdma_write_immed(b->b.pz, 1, &l, c, &r, 7, DEFAULT), bad_ep);

	/* the rest of the extension is not offered */
	DAT_UINT64 counters[4] = {0};
	CHECK_RET(dat_ib_post_send_ud(ep, 1, &l, NULL, c, DEFAULT), unsupported);
	CHECK_RET(dat_extension_op(b->b.ia, DAT_IB_QUERY_COUNTERS_OP, 0, counters, 0), unsupported);
	CHECK_RET(dat_extension_op(ep, DAT_IB_COLLECTIVE_BARRIER_OP, NULL, c, DEFAULT), unsupported);

	/* fetch_and_add(ep 1, op 2, add_val 3, lbuf 4, cookie 5, rbuf 6, flags 7) */
	CHECK_RET(dat_ib_post_fetch_and_add(ep, 1, NULL, c, &r, DEFAULT), BAD(4));
	CHECK_RET(dat_ib_post_fetch_and_add(ep, 1, &l, c, NULL, DEFAULT), BAD(6));
	CHECK_RET(dat_ib_post_fetch_and_add(ep, 1, &l, c, &r, 0x100), BAD(7));
	/* cmp_and_swap(ep 1, op 2, cmp 3, swap 4, lbuf 5, cookie 6, rbuf 7, flags 8) */
	CHECK_RET(dat_ib_post_cmp_and_swap(ep, 0, 1, NULL, c, &r, DEFAULT), BAD(5));
	CHECK_RET(dat_ib_post_cmp_and_swap(ep, 0, 1, &l, c, NULL, DEFAULT), BAD(7));
	CHECK_RET(dat_ib_post_cmp_and_swap(ep, 0, 1, &l, c, &r, 0x100), BAD(8));

	/* exactly 8 local bytes, at least 8 remote ones, 8-aligned remotely */
	DAT_LMR_TRIPLET l4 = {b->address, 4, b->lmr_context}, l16 = {b->address, 16, b->lmr_context};
	DAT_LMR_TRIPLET l0 = {b->address, 0, b->lmr_context};
	DAT_RMR_TRIPLET r4 = {a->address, 4, a->rmr_context}, r16 = {a->address, 16, a->rmr_context};
	DAT_RMR_TRIPLET odd = {a->address + 4, 8, a->rmr_context};
	CHECK_RET(dat_ib_post_fetch_and_add(ep, 1, &l4, c, &r, DEFAULT), length);
	CHECK_RET(dat_ib_post_fetch_and_add(ep, 1, &l16, c, &r16, DEFAULT), length);
	CHECK_RET(dat_ib_post_fetch_and_add(ep, 1, &l0, c, &r, DEFAULT), length);
	CHECK_RET(dat_ib_post_fetch_and_add(ep, 1, &l, c, &r4, DEFAULT), length);
	CHECK_RET(dat_ib_post_cmp_and_swap(ep, 0, 1, &l16, c, &r, DEFAULT), length);
	CHECK_RET(dat_ib_post_cmp_and_swap(ep, 0, 1, &l, c, &r4, DEFAULT), length);
	CHECK_RET(dat_ib_post_fetch_and_add(ep, 1, &l, c, &odd, DEFAULT), BAD(6));
	CHECK_RET(dat_ib_post_cmp_and_swap(ep, 0, 1, &l, c, &odd, DEFAULT), BAD(7));

	/* the local segment, as an RDMA Read's: an LMR of the EP's PZ that grants LOCAL_WRITE,
	 * and inside it */
	DAT_LMR_TRIPLET unknown = {b->address, 8, b->lmr_context ^ 0x5a5a};
	CHECK_RET(dat_ib_post_fetch_and_add(ep, 1, &unknown, c, &r, DEFAULT), privileges);
	CHECK_RET(dat_ib_post_cmp_and_swap(ep, 0, 1, &unknown, c, &r, DEFAULT), privileges);
	DAT_LMR_CONTEXT ro_context, other_context;
	DAT_LMR_HANDLE ro = register_va(&b->b, b->b.pz, b->buf, 64, DAT_MEM_PRIV_LOCAL_READ_FLAG,
					&ro_context, NULL);
	DAT_LMR_TRIPLET read_only = {b->address, 8, ro_context};
	CHECK_RET(dat_ib_post_fetch_and_add(ep, 1, &read_only, c, &r, DEFAULT), privileges);
	DAT_PZ_HANDLE other_pz;
	CHECK_RET(dat_pz_create(b->b.ia, &other_pz), DAT_SUCCESS);
	DAT_LMR_HANDLE other =
		register_va(&b->b, other_pz, b->buf, 64, ALL_PRIVS, &other_context, NULL);
	DAT_LMR_TRIPLET elsewhere = {b->address, 8, other_context};
	CHECK_RET(dat_ib_post_cmp_and_swap(ep, 0, 1, &elsewhere, c, &r, DEFAULT),
		  ERR(DAT_PROTECTION_VIOLATION, 0));
	DAT_LMR_TRIPLET past = {b->address + BUF_LEN - 4, 8, b->lmr_context};
	CHECK_RET(dat_ib_post_fetch_and_add(ep, 1, &past, c, &r, DEFAULT), BAD(4));
	CHECK_RET(dat_ib_post_cmp_and_swap(ep, 0, 1, &past, c, &r, DEFAULT), BAD(5));

	/* rdma_write_immed(ep 1, op 2, segments 3, lbuf 4, cookie 5, rbuf 6, idata 7, flags 8):
	 * an RDMA Write's checks */
	DAT_LMR_TRIPLET src = {b->address, 100, b->lmr_context};
	DAT_RMR_TRIPLET dst = {a->address, 100, a->rmr_context};
	DAT_RMR_TRIPLET short_dst = {a->address, 99, a->rmr_context};
	CHECK_RET(dat_ib_post_rdma_write_immed(ep, -1, &src, c, &dst, 7, DEFAULT), BAD(3));
	CHECK_RET(dat_ib_post_rdma_write_immed(ep, 1, NULL, c, &dst, 7, DEFAULT), BAD(4));
	CHECK_RET(dat_ib_post_rdma_write_immed(ep, 1, &src, c, NULL, 7, DEFAULT), BAD(6));
	CHECK_RET(dat_ib_post_rdma_write_immed(ep, 1, &src, c, &dst, 7, 0x100), BAD(8));
	CHECK_RET(dat_ib_post_rdma_write_immed(ep, 1, &src, c, &short_dst, 7, DEFAULT), length);
	CHECK_RET(dat_ib_post_rdma_write_immed(ep, 1, &past, c, &dst, 7, DEFAULT), BAD(4));
	CHECK_RET(dat_ib_post_rdma_write_immed(ep, 1, &unknown, c, &dst, 7, DEFAULT), privileges);
#undef BAD

	CHECK_RET(dat_lmr_free(other), DAT_SUCCESS);
	CHECK_RET(dat_pz_free(other_pz), DAT_SUCCESS);
	CHECK_RET(dat_lmr_free(ro), DAT_SUCCESS);
	DAT_EVENT none;
	CHECK_RET(dat_evd_dequeue(b->b.dto_evd, &none), DAT_QUEUE_EMPTY); /* nothing was posted */
}

/* fetch_and_add and cmp_and_swap into a's memory: the original value comes back into b's. */
static void check_atomics(struct side *a, struct side *b)
{
	unsigned char *target = a->buf, *result = b->buf;
	set_word(target, 100);
	set_word(target + 8, 0x1111111111111111u);
	set_word(result, ~(uint64_t)0);
	DAT_LMR_TRIPLET l = {b->address, 8, b->lmr_context};
	DAT_RMR_TRIPLET r16 = {a->address, 16, a->rmr_context}; /* acts on its first 8 bytes */
	DAT_RMR_TRIPLET r = {a->address, 8, a->rmr_context};
	DAT_DTO_COOKIE c = {.as_64 = 0x10};
	CHECK_RET(dat_ib_post_fetch_and_add(b->ep, 5, &l, c, &r16, DEFAULT), DAT_SUCCESS);
	WAIT_IB(b->b.dto_evd, DAT_IB_DTO_FETCH_ADD, 0x10, DAT_DTO_SUCCESS, DAT_IB_FETCH_AND_ADD, NULL);
	CHECK(word_at(result) == 100 && word_at(target) == 105);
	CHECK(word_at(target + 8) == 0x1111111111111111u);

	c.as_64 = 0x11; /* matching: swapped */
	CHECK_RET(dat_ib_post_cmp_and_swap(b->ep, 105, 7, &l, c, &r, DEFAULT), DAT_SUCCESS);
	WAIT_IB(b->b.dto_evd, DAT_IB_DTO_CMP_SWAP, 0x11, DAT_DTO_SUCCESS, DAT_IB_CMP_AND_SWAP, NULL);
	CHECK(word_at(result) == 105 && word_at(target) == 7);

	c.as_64 = 0x12; /* not matching: left alone, the value still returned */
	set_word(result, 0);
	CHECK_RET(dat_ib_post_cmp_and_swap(b->ep, 1, 9, &l, c, &r, DEFAULT), DAT_SUCCESS);
	WAIT_IB(b->b.dto_evd, DAT_IB_DTO_CMP_SWAP, 0x12, DAT_DTO_SUCCESS, DAT_IB_CMP_AND_SWAP, NULL);
	CHECK(word_at(result) == 7 && word_at(target) == 7);

	/* a 64-bit add wraps, and the result may land anywhere 8 bytes fit in b's LMR */
	set_word(target + 64, UINT64_MAX);
	DAT_LMR_TRIPLET l2 = {b->address + 333, 8, b->lmr_context};
	DAT_RMR_TRIPLET r2 = {a->address + 64, 8, a->rmr_context};
	c.as_64 = 0x13;
	CHECK_RET(dat_ib_post_fetch_and_add(b->ep, 2, &l2, c, &r2, DEFAULT), DAT_SUCCESS);
	WAIT_IB(b->b.dto_evd, DAT_IB_DTO_FETCH_ADD, 0x13, DAT_DTO_SUCCESS, DAT_IB_FETCH_AND_ADD, NULL);
	CHECK(word_at(result + 333) == UINT64_MAX && word_at(target + 64) == 1);

}

/* RDMA Writes with immediate data, unfenced and fenced: b's request completes as
 * RDMA_WRITE_IMMED, a's receive as RDMA_WRITE_IMMED_DATA with the immediate and the Write's
 * length, and the bytes landed. */
static void check_write_immed(struct side *a, struct side *b)
{
	static const DAT_COMPLETION_FLAGS flags[2] = {DEFAULT, DAT_COMPLETION_BARRIER_FENCE_FLAG};
	for (uint64_t i = 0; i < 2; i++) {
		unsigned char *from = b->buf + 1024, *into = a->buf + 16384 + i * 2048;
		DAT_LMR_TRIPLET rv = {a->address + 8192, 64, a->lmr_context};
		DAT_DTO_COOKIE rc = {.as_64 = 0x20 + i};
		CHECK_RET(dat_ep_post_recv(a->ep, 1, &rv, rc, DEFAULT), DAT_SUCCESS);
		for (int k = 0; k < 1000; k++)
			from[k] = (unsigned char)(k * 7 + (int)i);
		DAT_LMR_TRIPLET src[2] = {{b->address + 1024, 400, b->lmr_context},
					  {b->address + 1424, 600, b->lmr_context}};
		DAT_RMR_TRIPLET dst = {(DAT_VADDR)(uintptr_t)into, 1000, a->rmr_context};
		DAT_DTO_COOKIE c = {.as_64 = 0x30 + i};
		DAT_UINT32 immediate = 0xfeedf00du + (DAT_UINT32)i;
		CHECK_RET(dat_ib_post_rdma_write_immed(b->ep, 2, src, c, &dst, immediate, flags[i]),
			  DAT_SUCCESS);
		DAT_VLEN length = 0;
		DAT_IB_EXTENSION_EVENT_DATA x =
			WAIT_IB(b->b.dto_evd, DAT_IB_DTO_RDMA_WRITE_IMMED, 0x30 + i, DAT_DTO_SUCCESS,
				DAT_IB_RDMA_WRITE_IMMED, &length);
		CHECK(length == 1000 && x.val.immed.data == 0);
		length = 0;
		x = WAIT_IB(a->b.dto_evd, DAT_IB_DTO_RECV_IMMED, 0x20 + i, DAT_DTO_SUCCESS,
			    DAT_IB_RDMA_WRITE_IMMED_DATA, &length);
		CHECK(length == 1000 && x.val.immed.data == immediate);
		CHECK(!memcmp(into, from, 1000));
	}
}

/* An atomic through a window bound with REMOTE_ATOMIC (over a's LMR, which grants it). */
static void check_window_atomic(struct side *a, struct side *b)
{
	unsigned char *target = a->buf + 4096 + 8, *result = b->buf;
	DAT_LMR_TRIPLET l = {b->address, 8, b->lmr_context};
	DAT_RMR_HANDLE rmr;
	DAT_RMR_CONTEXT window;
	DAT_RMR_COOKIE rc = {.as_64 = 0x77};
	DAT_LMR_TRIPLET range = {a->address + 4096, 4096, a->lmr_context};
	CHECK_RET(dat_rmr_create(a->b.pz, &rmr), DAT_SUCCESS);
	CHECK_RET(dat_rmr_bind(rmr, a->lmr, &range, WINDOW_PRIVS, DAT_VA_TYPE_VA, a->ep, rc,
			       DEFAULT, &window),
		  DAT_SUCCESS);
	DAT_EVENT ev = WAIT(a->b.dto_evd, DAT_RMR_BIND_COMPLETION_EVENT);
	CHECK(ev.event_data.rmr_completion_event_data.status == DAT_RMR_BIND_SUCCESS);
	set_word(target, 40);
	DAT_RMR_TRIPLET through = {(DAT_VADDR)(uintptr_t)target, 8, window};
	DAT_DTO_COOKIE c = {.as_64 = 0x14};
	CHECK_RET(dat_ib_post_cmp_and_swap(b->ep, 40, 41, &l, c, &through, DEFAULT), DAT_SUCCESS);
	WAIT_IB(b->b.dto_evd, DAT_IB_DTO_CMP_SWAP, 0x14, DAT_DTO_SUCCESS, DAT_IB_CMP_AND_SWAP, NULL);
	CHECK(word_at(result) == 40 && word_at(target) == 41);
	CHECK_RET(dat_rmr_free(rmr), DAT_SUCCESS);
}

/* An atomic into memory registered without REMOTE_ATOMIC: the target refuses it. */
static void check_refused_atomic(struct side *a, struct side *b)
{
	set_word(a->plain, 5);
	DAT_LMR_TRIPLET l = {b->address, 8, b->lmr_context};
	DAT_RMR_TRIPLET r = {(DAT_VADDR)(uintptr_t)a->plain, 8, a->plain_rmr_context};
	DAT_DTO_COOKIE c = {.as_64 = 0x40};
	CHECK_RET(dat_ib_post_fetch_and_add(b->ep, 1, &l, c, &r, DEFAULT), DAT_SUCCESS);
	WAIT_IB(b->b.dto_evd, DAT_IB_DTO_FETCH_ADD, 0x40, DAT_DTO_ERR_REMOTE_ACCESS,
		DAT_IB_FETCH_AND_ADD, NULL);
	CHECK(word_at(a->plain) == 5);
}

/* The refused atomic may end the connection (as a refused Read does): if it does, each side
 * is told BROKEN before its EP goes. */
static void settle(struct side *s)
{
	DAT_EVENT ev;
	DAT_COUNT nmore;
	if (dat_evd_wait(s->b.conn_evd, SETTLE_US, 1, &ev, &nmore) == DAT_SUCCESS)
		CHECK(ev.event_number == DAT_CONNECTION_EVENT_BROKEN);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s IA_NAME [ACTIVE_IA_NAME]\n", argv[0]);
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	struct side a, b;
	open_side(&a, argv[1]);
	open_side(&b, argc > 2 ? argv[2] : argv[1]);
	check_attributes(&a);
	check_unconnected(&a, &b);
	if (!failures)
		accept_connection(&a.b, a.ep, &b.b, b.ep, CONN_QUAL);
	if (!failures)
		check_argument_errors(&a, &b);
	if (!failures)
		check_atomics(&a, &b);
	if (!failures)
		check_write_immed(&a, &b);
	if (!failures)
		check_window_atomic(&a, &b);
	if (!failures) {
		check_refused_atomic(&a, &b);
		settle(&b);
		settle(&a);
	}
	close_side(&a);
	close_side(&b);
	printf(failures ? "FAILED\n" : "PASSED\n");
	return failures ? 1 : 0;
}
