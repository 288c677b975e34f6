/* Shared receive queues through libdat2, one IA: dat_ia_query's SRQ attributes, and the
 * argument errors and state rules of dat_srq_create, _query, _post_recv, _resize, _set_lw,
 * _free and dat_ep_create_with_srq; dat_srq_resize racing dat_srq_set_lw from two threads
 * never leaves the watermark above the size.
 *
 * usage: srq_errors IA_NAME
 * Prints "PASSED" and exits 0 when every check holds; each failed check prints its line. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdbool.h>

#include "srq_side.h"

/* dat_ia_query: the SRQ limits and support, and DAT_IB_TRANSPORT_MTU. */
static void check_attributes(struct side *a)
{
	DAT_IA_ATTR ia;
	DAT_PROVIDER_ATTR pr;
	CHECK_RET(dat_ia_query(a->b.ia, NULL, DAT_IA_FIELD_ALL, &ia, DAT_PROVIDER_FIELD_ALL, &pr),
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
	CHECK_RET(dat_srq_create(a->b.ia, a->b.pz, NULL, &srq), arg3);
	CHECK_RET(dat_srq_create(a->b.ia, a->b.pz, &attr, NULL),
		  ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4));
	CHECK_RET(dat_srq_create(a->b.ia, a->b.dto_evd, &attr, &srq),
		  ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_PZ));
	attr.max_recv_dtos = 0;
	CHECK_RET(dat_srq_create(a->b.ia, a->b.pz, &attr, &srq), arg3);
	attr.max_recv_dtos = 4, attr.max_recv_iov = 0;
	CHECK_RET(dat_srq_create(a->b.ia, a->b.pz, &attr, &srq), arg3);
	attr.max_recv_iov = 2, attr.low_watermark = 5;
	CHECK_RET(dat_srq_create(a->b.ia, a->b.pz, &attr, &srq), arg3);
	attr.low_watermark = -1;
	CHECK_RET(dat_srq_create(a->b.ia, a->b.pz, &attr, &srq), arg3);
	attr.low_watermark = 0, attr.max_recv_dtos = 4097;
	CHECK_RET(dat_srq_create(a->b.ia, a->b.pz, &attr, &srq),
		  ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_SRQ));
	attr.max_recv_dtos = 4, attr.max_recv_iov = 17; /* the daemon's answer: past MAX_IOV */
	CHECK_RET(dat_srq_create(a->b.ia, a->b.pz, &attr, &srq), arg3);

	attr = (DAT_SRQ_ATTR){.max_recv_dtos = 4096, .max_recv_iov = 16, .low_watermark = 7};
	CHECK_RET(dat_srq_create(a->b.ia, a->b.pz, &attr, &srq), DAT_SUCCESS);
	DAT_HANDLE_TYPE type;
	CHECK_RET(dat_get_handle_type(srq, &type), DAT_SUCCESS);
	CHECK(type == DAT_HANDLE_TYPE_SRQ);
	DAT_SRQ_PARAM p;
	memset(&p, 0xff, sizeof(p));
	CHECK_RET(dat_srq_query(srq, DAT_SRQ_FIELD_ALL, &p), DAT_SUCCESS);
	/* (ia_handle is the provider's: libdat2 hands programs its own IA handles) */
	CHECK(p.ia_handle != DAT_HANDLE_NULL && p.srq_state == DAT_SRQ_STATE_OPERATIONAL);
	CHECK(p.pz_handle == a->b.pz && p.max_recv_dtos == 4096 && p.max_recv_iov == 16);
	CHECK(p.low_watermark == 7 && p.available_dto_count == 0 && p.outstanding_dto_count == 0);
	CHECK_RET(dat_srq_query(srq, 0x100, &p), ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2));
	CHECK_RET(dat_srq_query(srq, DAT_SRQ_FIELD_ALL, NULL), arg3);
	CHECK_RET(dat_srq_free(srq), DAT_SUCCESS);
	CHECK_RET(dat_srq_free(a->b.pz), ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_SRQ));
}

/* dat_ep_create_with_srq: its errors, the EPs it makes, what they refuse. */
static void check_srq_eps(struct side *a, DAT_SRQ_HANDLE srq)
{
	DAT_EP_HANDLE ep = DAT_HANDLE_NULL;
	DAT_PZ_HANDLE other;
	CHECK_RET(dat_pz_create(a->b.ia, &other), DAT_SUCCESS);
	CHECK_RET(dat_ep_create_with_srq(a->b.ia, a->b.pz, a->b.dto_evd, a->b.dto_evd,
					 a->b.conn_evd, a->b.pz, NULL, &ep),
		  ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_SRQ));
	CHECK_RET(dat_ep_create_with_srq(a->b.ia, a->b.pz, a->b.dto_evd, a->b.dto_evd, a->b.conn_evd, srq,
					 NULL, NULL),
		  ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG8));
	/* the daemon's answer: an EP of an SRQ is in the SRQ's PZ */
	CHECK_RET(dat_ep_create_with_srq(a->b.ia, other, a->b.dto_evd, a->b.dto_evd, a->b.conn_evd, srq,
					 NULL, &ep),
		  ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG6));
	CHECK_RET(dat_pz_free(other), DAT_SUCCESS);
	for (int i = 0; i < 2; i++)
		CHECK_RET(dat_ep_create_with_srq(a->b.ia, a->b.pz, a->b.dto_evd, a->b.dto_evd, a->b.conn_evd,
						 srq, NULL, &a->ep[i]),
			  DAT_SUCCESS);
	DAT_EP_PARAM p;
	CHECK_RET(dat_ep_query(a->ep[1], DAT_EP_FIELD_ALL, &p), DAT_SUCCESS);
	CHECK(p.srq_handle == srq && p.pz_handle == a->b.pz && p.recv_evd_handle == a->b.dto_evd);
	CHECK(p.ep_state == DAT_EP_STATE_UNCONNECTED);
	CHECK_RET(dat_ep_create(a->b.ia, a->b.pz, a->b.dto_evd, a->b.dto_evd, a->b.conn_evd, NULL, &ep),
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
	DAT_LMR_HANDLE read_only = register_va(&a->b, a->b.pz, elsewhere, sizeof(elsewhere),
					       DAT_MEM_PRIV_LOCAL_READ_FLAG, &lctx, &rctx);
	DAT_LMR_TRIPLET ro = {(DAT_VADDR)(uintptr_t)elsewhere, 8, lctx};
	CHECK_RET(dat_srq_post_recv(srq, 1, &ro, c), ERR(DAT_PRIVILEGES_VIOLATION, 0));
	CHECK_RET(dat_lmr_free(read_only), DAT_SUCCESS);
	DAT_PZ_HANDLE other;
	CHECK_RET(dat_pz_create(a->b.ia, &other), DAT_SUCCESS);
	DAT_LMR_HANDLE foreign = register_va(&a->b, other, elsewhere, sizeof(elsewhere), ALL_PRIVS,
					     &lctx, &rctx);
	ro.lmr_context = lctx;
	CHECK_RET(dat_srq_post_recv(srq, 1, &ro, c), ERR(DAT_PROTECTION_VIOLATION, 0));
	CHECK_RET(dat_lmr_free(foreign), DAT_SUCCESS);
	CHECK_RET(dat_pz_free(other), DAT_SUCCESS);
	CHECK_RET(dat_srq_post_recv(a->b.pz, 1, iov, c),
		  ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_SRQ));
	COUNTS(srq, 0, 0);
}

/* Each call of one thread checks the rule after it: the watermark is never above the size. */
struct racer {
	struct side *a;
	DAT_SRQ_HANDLE srq;
	bool set_lw; /* else resize */
	int broken; /* queries that found low_watermark > max_recv_dtos */
};

static void *race(void *arg)
{
	struct racer *r = arg;
	for (int i = 0; i < 300; i++) {
		if (r->set_lw) {
			dat_srq_set_lw(r->srq, i % 2 ? 2 : 6); /* 6 above a size of 4: refused */
			DAT_EVENT ev; /* the watermark events it raises (the SRQ holds none) */
			while (dat_evd_dequeue(r->a->b.async_evd, &ev) == DAT_SUCCESS)
				;
		} else {
			dat_srq_resize(r->srq, i % 2 ? 4 : 8); /* 4 below a watermark of 6: refused */
		}
		DAT_SRQ_PARAM p;
		if (dat_srq_query(r->srq, DAT_SRQ_FIELD_ALL, &p) == DAT_SUCCESS &&
		    p.low_watermark > p.max_recv_dtos)
			r->broken++;
	}
	return NULL;
}

static void check_lw_resize_race(struct side *a, DAT_SRQ_HANDLE srq)
{
	struct racer r[2] = {{a, srq, true, 0}, {a, srq, false, 0}};
	pthread_t t[2];
	for (int k = 0; k < 2; k++)
		CHECK(pthread_create(&t[k], NULL, race, &r[k]) == 0);
	for (int k = 0; k < 2; k++)
		pthread_join(t[k], NULL);
	CHECK(r[0].broken == 0 && r[1].broken == 0);
	CHECK_RET(dat_srq_set_lw(srq, 0), DAT_SUCCESS);
	CHECK_RET(dat_srq_resize(srq, DEPTH), DAT_SUCCESS);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s IA_NAME\n", argv[0]);
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	struct side a;
	open_side(&a, argv[1]);
	check_attributes(&a);
	check_create(&a);
	DAT_SRQ_HANDLE srq = DAT_HANDLE_NULL;
	DAT_SRQ_ATTR attr = {.max_recv_dtos = DEPTH, .max_recv_iov = 2, .low_watermark = 0};
	CHECK_RET(dat_srq_create(a.b.ia, a.b.pz, &attr, &srq), DAT_SUCCESS);
	check_srq_eps(&a, srq);
	check_post_errors(&a, srq);
	check_lw_resize_race(&a, srq);
	for (int k = 0; k < 2; k++)
		CHECK_RET(dat_ep_free(a.ep[k]), DAT_SUCCESS);
	CHECK_RET(dat_srq_free(srq), DAT_SUCCESS);
	close_side(&a);
	printf(failures ? "FAILED\n" : "PASSED\n");
	return failures ? 1 : 0;
}
