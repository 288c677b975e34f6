/* The checks the provider's C tests share: each failed check prints its line and what it got,
 * and counts; a test prints PASSED only when none failed. */
#ifndef DF_TEST_CHECK_H
#define DF_TEST_CHECK_H

#include <dat2/udat.h>
#include <stdio.h>

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

#endif
