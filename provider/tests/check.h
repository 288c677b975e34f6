/* The checks the provider's C tests share: each failed check prints its line and what it got,
 * and counts; a test prints PASSED only when none failed. */
#ifndef DF_TEST_CHECK_H
#define DF_TEST_CHECK_H

#include <dat2/udat.h>
#include <stdio.h>
#include <string.h>

static int failures;

/* DAT_ERROR(type, subtype): what a provider returns for an error (class bit set). */
#define ERR(type, subtype) ((DAT_RETURN)(DAT_CLASS_ERROR | (type) | (subtype)))

#define CHECK(cond)                                                                         \
	do {                                                                                \
		if (!(cond)) {                                                              \
			printf("FAILED line %d: %s\n", __LINE__, #cond);                    \
			failures++;                                                         \
		}                                                                           \
	} while (0)
#define CHECK_RET(call, want)                                                               \
	do {                                                                                \
		DAT_RETURN got_ = (call);                                                   \
		if (got_ != (DAT_RETURN)(want)) {                                           \
			printf("FAILED line %d: %s gave 0x%08x, not 0x%08x\n", __LINE__, #call, \
			       (unsigned)got_, (unsigned)(want));                           \
			failures++;                                                         \
		}                                                                           \
	} while (0)

/* The next event on ``evd``, which must be ``want`` within ``timeout`` us (else a failure that
 * names ``line``, the caller's). */
static inline DAT_EVENT wait_event_at(DAT_EVD_HANDLE evd, DAT_EVENT_NUMBER want,
				      DAT_TIMEOUT timeout, int line)
{
	DAT_EVENT ev;
	DAT_COUNT nmore;
	memset(&ev, 0, sizeof(ev));
	DAT_RETURN ret = dat_evd_wait(evd, timeout, 1, &ev, &nmore);
	if (ret != DAT_SUCCESS || ev.event_number != want) {
		printf("FAILED line %d: wait gave 0x%08x, event 0x%x, not 0x%x\n", line,
		       (unsigned)ret, (unsigned)ev.event_number, (unsigned)want);
		failures++;
	}
	return ev;
}

#endif
