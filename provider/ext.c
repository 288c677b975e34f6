/* dat_extension_op: the IB extensions (dat_ib_extensions.h, DAT_IB_EXTENSION_VERSION 209).
 *
 * Offered: fetch-and-add, compare-and-swap and RDMA Write with immediate data, each posted on an
 * EP by post.c with the checks and queue rules of the other request posts. Their arguments are
 * read in the order and types of the header's dat_ib_post_* macros. */
#include "df.h"

/* dat_ib_post_fetch_and_add(ep, add_val, lbuf, cookie, rbuf, flags) */
static DAT_RETURN fetch_and_add(DAT_HANDLE ep, va_list args)
{
	DAT_UINT64 add = va_arg(args, DAT_UINT64);
	DAT_LMR_TRIPLET *lbuf = va_arg(args, DAT_LMR_TRIPLET *);
	DAT_DTO_COOKIE cookie = va_arg(args, DAT_DTO_COOKIE);
	DAT_RMR_TRIPLET *rbuf = va_arg(args, DAT_RMR_TRIPLET *);
	DAT_COMPLETION_FLAGS flags = va_arg(args, DAT_COMPLETION_FLAGS);
	return df_ep_post_fetch_and_add(ep, add, lbuf, cookie, rbuf, flags);
}

/* dat_ib_post_cmp_and_swap(ep, cmp_val, swap_val, lbuf, cookie, rbuf, flags) */
static DAT_RETURN cmp_and_swap(DAT_HANDLE ep, va_list args)
{
	DAT_UINT64 compare = va_arg(args, DAT_UINT64);
	DAT_UINT64 swap = va_arg(args, DAT_UINT64);
	DAT_LMR_TRIPLET *lbuf = va_arg(args, DAT_LMR_TRIPLET *);
	DAT_DTO_COOKIE cookie = va_arg(args, DAT_DTO_COOKIE);
	DAT_RMR_TRIPLET *rbuf = va_arg(args, DAT_RMR_TRIPLET *);
	DAT_COMPLETION_FLAGS flags = va_arg(args, DAT_COMPLETION_FLAGS);
	return df_ep_post_cmp_and_swap(ep, compare, swap, lbuf, cookie, rbuf, flags);
}

/* dat_ib_post_rdma_write_immed(ep, segments, lbuf, cookie, rbuf, idata, flags) */
static DAT_RETURN rdma_write_immed(DAT_HANDLE ep, va_list args)
{
	DAT_COUNT segments = va_arg(args, DAT_COUNT);
	DAT_LMR_TRIPLET *lbuf = va_arg(args, DAT_LMR_TRIPLET *);
	DAT_DTO_COOKIE cookie = va_arg(args, DAT_DTO_COOKIE);
	DAT_RMR_TRIPLET *rbuf = va_arg(args, DAT_RMR_TRIPLET *);
	DAT_UINT32 immediate = va_arg(args, DAT_UINT32);
	DAT_COMPLETION_FLAGS flags = va_arg(args, DAT_COMPLETION_FLAGS);
	return df_ep_post_rdma_write_immed(ep, segments, lbuf, cookie, rbuf, immediate, flags);
}

/* The handle is checked by the post (DAT_INVALID_HANDLE_EP unless an EP of ours). */
DAT_RETURN df_handle_extendedop(DAT_HANDLE handle, DAT_EXTENDED_OP op, va_list args)
{
	switch (op) {
	case DAT_IB_FETCH_AND_ADD_OP:
		return fetch_and_add(handle, args);
	case DAT_IB_CMP_AND_SWAP_OP:
		return cmp_and_swap(handle, args);
	case DAT_IB_RDMA_WRITE_IMMED_OP:
		return rdma_write_immed(handle, args);
	default: /* UD, counters, collectives and the rest of the extension are not offered */
		return DF_ERROR(DAT_MODEL_NOT_SUPPORTED, 0);
	}
}
