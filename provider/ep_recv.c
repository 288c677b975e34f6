/* An EP's receive buffers: dat_ep_recv_query and dat_ep_set_watermark.
 *
 * Without an SRQ every receive is allocated to its EP when it is posted, and receives complete
 * in posting order: the buffers allocated are those posted and not completed (the RQ's prod
 * minus DONE), and their span is that count. The daemon watches the watermarks (it takes the
 * receives): past the soft one, DAT_ASYNC_ERROR_EP_BROKEN with reason
 * DAT_SRQ_SOFT_HIGH_WATERMARK_EVENT on the async EVD, once per setting; past the hard one, a
 * connected EP breaks. */
#include "df.h"

DAT_RETURN df_ep_recv_query(DAT_EP_HANDLE handle, DAT_COUNT *nbufs_allocated,
			    DAT_COUNT *bufs_alloc_span)
{
	struct df_ep *ep = df_obj_check(handle, DAT_HANDLE_TYPE_EP);
	if (!ep)
		return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
	pthread_mutex_lock(&ep->obj.ia->chan.lock);
	uint32_t held = df_ep_recvs(ep);
	pthread_mutex_unlock(&ep->obj.ia->chan.lock);
	if (nbufs_allocated)
		*nbufs_allocated = (DAT_COUNT)held;
	if (bufs_alloc_span)
		*bufs_alloc_span = (DAT_COUNT)held;
	return DAT_SUCCESS;
}

struct watermark_args {
	uint32_t ep;
	DAT_COUNT soft, hard;
};

/* proto.calls.EpSetWatermark: [ep, soft, hard] (-1: DAT_WATERMARK_INFINITE). */
static void pack_watermark(msgpack_packer *pk, const void *arg)
{
	const struct watermark_args *a = arg;
	msgpack_pack_array(pk, 3);
	msgpack_pack_unsigned_int(pk, a->ep);
	msgpack_pack_int(pk, a->soft);
	msgpack_pack_int(pk, a->hard);
}

DAT_RETURN df_ep_set_watermark(DAT_EP_HANDLE handle, DAT_COUNT soft, DAT_COUNT hard)
{
	struct df_ep *ep = df_obj_check(handle, DAT_HANDLE_TYPE_EP);
	if (!ep)
		return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
	if (soft < DAT_WATERMARK_INFINITE)
		return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	if (hard < DAT_WATERMARK_INFINITE)
		return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
	struct watermark_args a = {ep->obj.handle, soft, hard};
	return df_call(ep->obj.ia, "ep_set_watermark", pack_watermark, &a, NULL);
}
