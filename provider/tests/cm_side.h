/* What the connection-management C tests share: two sides (IAs), EPs, waits for events and
 * states, the passive node's address as dtest passes it. */
#ifndef DF_TEST_CM_SIDE_H
#define DF_TEST_CM_SIDE_H

#include <arpa/inet.h>
#include <dat2/udat.h>
#include <netinet/in.h>
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

static inline void open_side(struct side *s, char *name)
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

static inline void close_side(struct side *s)
{
	CHECK_RET(dat_evd_free(s->dto_evd), DAT_SUCCESS);
	CHECK_RET(dat_evd_free(s->conn_evd), DAT_SUCCESS);
	CHECK_RET(dat_evd_free(s->cr_evd), DAT_SUCCESS);
	CHECK_RET(dat_pz_free(s->pz), DAT_SUCCESS);
	CHECK_RET(dat_ia_close(s->ia, DAT_CLOSE_GRACEFUL_FLAG), DAT_SUCCESS);
}

static inline DAT_EP_HANDLE new_ep(const struct side *s)
{
	DAT_EP_HANDLE ep = DAT_HANDLE_NULL;
	CHECK_RET(dat_ep_create(s->ia, s->pz, s->dto_evd, s->dto_evd, s->conn_evd, NULL, &ep),
		  DAT_SUCCESS);
	return ep;
}

#define WAIT(evd, want) wait_event_at((evd), (want), WAIT_US, __LINE__)

static inline void check_state(DAT_EP_HANDLE ep, DAT_EP_STATE want, int line)
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
static inline DAT_CONNECTION_EVENT_DATA conn_event(const struct side *s, DAT_EP_HANDLE ep,
					    DAT_EVENT_NUMBER want, int line)
{
	DAT_EVENT ev = wait_event_at(s->conn_evd, want, WAIT_US, line);
	DAT_CONNECTION_EVENT_DATA d = ev.event_data.connect_event_data;
	if (d.ep_handle != ep) {
		printf("FAILED line %d: the event names EP %p, not %p\n", line, d.ep_handle, ep);
		failures++;
	}
	return d;
}
#define CONN_EVENT(s, ep, want) conn_event((s), (ep), (want), __LINE__)

/* The passive node's address as dtest passes it: from a host name, with no port. */
/* dat_ep_connect with what every case here passes: WAIT_US, best effort, default flags. */
static inline DAT_RETURN connect_ep(DAT_EP_HANDLE ep, void *to, DAT_CONN_QUAL qual, DAT_COUNT len,
				    void *pdata)
{
	return dat_ep_connect(ep, (DAT_IA_ADDRESS_PTR)to, qual, WAIT_US, len, pdata,
			      DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG);
}

static inline struct sockaddr_in no_port(const struct side *s)
{
	struct sockaddr_in to = s->address;
	to.sin_port = 0;
	return to;
}

static inline void pattern(unsigned char *p, int n, int base)
{
	for (int i = 0; i < n; i++)
		p[i] = (unsigned char)(base + i);
}

static inline int has_pattern(const unsigned char *p, int n, int base)
{
	for (int i = 0; i < n; i++)
		if (p[i] != (unsigned char)(base + i))
			return 0;
	return 1;
}

#define ALL_PRIVS (DAT_MEM_PRIV_LOCAL_READ_FLAG | DAT_MEM_PRIV_LOCAL_WRITE_FLAG | \
		   DAT_MEM_PRIV_REMOTE_READ_FLAG | DAT_MEM_PRIV_REMOTE_WRITE_FLAG)

/* Registered memory of one side. */
struct mem {
	char *buf;
	DAT_LMR_HANDLE lmr;
	DAT_LMR_CONTEXT lctx;
	DAT_RMR_CONTEXT rctx;
	DAT_VADDR addr;
};

static inline void reg(const struct side *s, struct mem *m)
{
	DAT_VLEN size;
	m->buf = calloc(1, 4096);
	DAT_REGION_DESCRIPTION region = {.for_va = m->buf};
	CHECK_RET(dat_lmr_create(s->ia, DAT_MEM_TYPE_VIRTUAL, region, 4096, s->pz, ALL_PRIVS,
				 DAT_VA_TYPE_VA, &m->lmr, &m->lctx, &m->rctx, &size, &m->addr),
		  DAT_SUCCESS);
}

static inline void unreg(struct mem *m)
{
	CHECK_RET(dat_lmr_free(m->lmr), DAT_SUCCESS);
	free(m->buf);
}

static inline DAT_EVENT software_event(void *pointer)
{
	DAT_EVENT ev;
	memset(&ev, 0, sizeof(ev));
	ev.event_number = DAT_SOFTWARE_EVENT;
	ev.event_data.software_event_data.pointer = pointer;
	return ev;
}

/* Both sides of a test program, from its two IA names (argv[1] passive, argv[2] active). */
static inline int open_sides(int argc, char **argv, struct side *a, struct side *b)
{
	if (argc < 3) {
		fprintf(stderr, "usage: %s PASSIVE_IA ACTIVE_IA\n", argv[0]);
		return 0;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	open_side(a, argv[1]);
	open_side(b, argv[2]);
	return 1;
}

/* Close both sides and say how the program went. */
static inline int close_sides(struct side *a, struct side *b)
{
	close_side(a);
	close_side(b);
	printf(failures ? "FAILED\n" : "PASSED\n");
	return failures ? 1 : 0;
}

#endif
