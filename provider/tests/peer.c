/* One end of a two-program RDMA Write test, each program on its own node.
 *
 * usage: peer IA_NAME target CONN_QUAL
 *        peer IA_NAME write|write-loop HOST CONN_QUAL ADDRESS RMR_CONTEXT LENGTH
 * The target registers a malloc'd buffer, prints "READY <address> <rmr_context> <length>" and
 * accepts one connection; when a line arrives on its stdin ("check") it checks that the
 * buffer holds the pattern (byte i = i * 13 + 1), then prints "ENDED <event number>" when the
 * connection ends, and PASSED. The writer connects, prints
 * "CONNECTED", and when a line arrives on its stdin RDMA-Writes the pattern into the target's
 * buffer, prints "WRITTEN <status>" after its completion and disconnects; write-loop goes on
 * writing until it is killed. The test stops the
 * target (SIGSTOP) between the two: the write lands in a stopped program. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dat2/udat.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#define WAIT_US (30 * 1000 * 1000)
#define PRIVS (DAT_MEM_PRIV_LOCAL_READ_FLAG | DAT_MEM_PRIV_LOCAL_WRITE_FLAG | \
	       DAT_MEM_PRIV_REMOTE_READ_FLAG | DAT_MEM_PRIV_REMOTE_WRITE_FLAG)

struct node {
	DAT_IA_HANDLE ia;
	DAT_EVD_HANDLE async_evd, evd, conn_evd, cr_evd;
	DAT_PZ_HANDLE pz;
	DAT_EP_HANDLE ep;
	DAT_LMR_HANDLE lmr;
	DAT_LMR_CONTEXT lmr_context;
	DAT_RMR_CONTEXT rmr_context;
	DAT_VADDR address;
};

static bool open_node(struct node *n, char *name, unsigned char *buf, DAT_VLEN len)
{
	DAT_REGION_DESCRIPTION region = {.for_va = buf};
	DAT_VLEN size;
	memset(n, 0, sizeof(*n));
	CHECK_RET(dat_ia_open(name, 8, &n->async_evd, &n->ia), DAT_SUCCESS);
	if (failures)
		return false;
	CHECK_RET(dat_pz_create(n->ia, &n->pz), DAT_SUCCESS);
	CHECK_RET(dat_evd_create(n->ia, 8, NULL, DAT_EVD_DTO_FLAG, &n->evd), DAT_SUCCESS);
	CHECK_RET(dat_evd_create(n->ia, 8, NULL, DAT_EVD_CONNECTION_FLAG, &n->conn_evd),
		  DAT_SUCCESS);
	CHECK_RET(dat_evd_create(n->ia, 8, NULL, DAT_EVD_CR_FLAG, &n->cr_evd), DAT_SUCCESS);
	CHECK_RET(dat_ep_create(n->ia, n->pz, n->evd, n->evd, n->conn_evd, NULL, &n->ep),
		  DAT_SUCCESS);
	CHECK_RET(dat_lmr_create(n->ia, DAT_MEM_TYPE_VIRTUAL, region, len, n->pz, PRIVS,
				 DAT_VA_TYPE_VA, &n->lmr, &n->lmr_context, &n->rmr_context, &size,
				 &n->address),
		  DAT_SUCCESS);
	return !failures;
}

static DAT_EVENT wait_for(DAT_EVD_HANDLE evd, DAT_EVENT_NUMBER want)
{
	DAT_EVENT ev;
	DAT_COUNT nmore;
	memset(&ev, 0, sizeof(ev));
	CHECK_RET(dat_evd_wait(evd, WAIT_US, 1, &ev, &nmore), DAT_SUCCESS);
	CHECK(ev.event_number == want);
	return ev;
}

static void wait_line(void)
{
	char line[64];
	if (!fgets(line, sizeof(line), stdin))
		failures++;
}

static int target(char *name, DAT_CONN_QUAL qual)
{
	enum { LEN = 65536 };
	unsigned char *buf = calloc(1, LEN + 5), *at = buf + 5; /* not aligned */
	struct node n;
	DAT_PSP_HANDLE psp;
	if (!open_node(&n, name, at, LEN))
		return 1;
	CHECK_RET(dat_psp_create(n.ia, qual, n.cr_evd, DAT_PSP_CONSUMER_FLAG, &psp), DAT_SUCCESS);
	printf("READY %llu %u %d\n", (unsigned long long)n.address, (unsigned)n.rmr_context, LEN);
	DAT_EVENT ev = wait_for(n.cr_evd, DAT_CONNECTION_REQUEST_EVENT);
	CHECK_RET(dat_cr_accept(ev.event_data.cr_arrival_event_data.cr_handle, n.ep, 0, NULL),
		  DAT_SUCCESS);
	wait_for(n.conn_evd, DAT_CONNECTION_EVENT_ESTABLISHED);
	char line[16] = "";
	if (!fgets(line, sizeof(line), stdin))
		failures++;
	for (int i = 0; !strncmp(line, "check", 5) && i < LEN; i++)
		if (at[i] != (unsigned char)(i * 13 + 1)) {
			printf("FAILED: byte %d is %u\n", i, at[i]);
			failures++;
			break;
		}
	DAT_COUNT nmore;
	CHECK_RET(dat_evd_wait(n.conn_evd, WAIT_US, 1, &ev, &nmore), DAT_SUCCESS);
	printf("ENDED 0x%x\n", (unsigned)ev.event_number);
	CHECK_RET(dat_psp_free(psp), DAT_SUCCESS);
	CHECK_RET(dat_ia_close(n.ia, DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS);
	free(buf);
	printf(failures ? "FAILED\n" : "PASSED\n");
	return failures ? 1 : 0;
}

static int writer(char *name, char **argv, bool loop)
{
	DAT_VLEN len = strtoull(argv[4], NULL, 0);
	unsigned char *buf = malloc(len);
	struct node n;
	struct sockaddr_in sa = {.sin_family = AF_INET};
	if (!buf || inet_pton(AF_INET, argv[0], &sa.sin_addr) != 1 || !open_node(&n, name, buf, len))
		return 1;
	for (DAT_VLEN i = 0; i < len; i++)
		buf[i] = (unsigned char)(i * 13 + 1);
	CHECK_RET(dat_ep_connect(n.ep, (DAT_IA_ADDRESS_PTR)&sa, strtoull(argv[1], NULL, 0), WAIT_US,
				 0, NULL, DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG),
		  DAT_SUCCESS);
	wait_for(n.conn_evd, DAT_CONNECTION_EVENT_ESTABLISHED);
	printf("CONNECTED\n");
	wait_line();
	DAT_LMR_TRIPLET src = {n.address, (DAT_SEG_LENGTH)len, n.lmr_context};
	DAT_RMR_TRIPLET dst = {strtoull(argv[2], NULL, 0), (DAT_SEG_LENGTH)len,
			       (DAT_RMR_CONTEXT)strtoul(argv[3], NULL, 0)};
	DAT_DTO_COOKIE cookie = {.as_64 = 9};
	CHECK_RET(dat_ep_post_rdma_write(n.ep, 1, &src, cookie, &dst, DAT_COMPLETION_DEFAULT_FLAG),
		  DAT_SUCCESS);
	DAT_EVENT ev = wait_for(n.evd, DAT_DTO_COMPLETION_EVENT);
	printf("WRITTEN %d\n", (int)ev.event_data.dto_completion_event_data.status);
	while (loop && !failures) { /* until killed */
		CHECK_RET(dat_ep_post_rdma_write(n.ep, 1, &src, cookie, &dst,
						 DAT_COMPLETION_DEFAULT_FLAG),
			  DAT_SUCCESS);
		wait_for(n.evd, DAT_DTO_COMPLETION_EVENT);
	}
	CHECK(ev.event_data.dto_completion_event_data.status == DAT_DTO_SUCCESS);
	CHECK_RET(dat_ep_disconnect(n.ep, DAT_CLOSE_GRACEFUL_FLAG), DAT_SUCCESS);
	wait_for(n.conn_evd, DAT_CONNECTION_EVENT_DISCONNECTED);
	CHECK_RET(dat_ia_close(n.ia, DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS);
	free(buf);
	printf(failures ? "FAILED\n" : "PASSED\n");
	return failures ? 1 : 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 4 && !strcmp(argv[2], "target"))
		return target(argv[1], strtoull(argv[3], NULL, 0));
	if (argc == 8 && !strcmp(argv[2], "write"))
		return writer(argv[1], argv + 3, false);
	if (argc == 8 && !strcmp(argv[2], "write-loop"))
		return writer(argv[1], argv + 3, true);
	fprintf(stderr, "usage: %s IA_NAME target CONN_QUAL | IA_NAME write HOST CONN_QUAL ADDRESS "
			"RMR_CONTEXT LENGTH\n", argv[0]);
	return 2;
}
