/* Memory windows: dat_rmr_create, dat_rmr_create_for_ep, dat_rmr_bind, dat_rmr_query,
 * dat_rmr_free. A window of dat_rmr_create_for_ep has DAT_RMR_SCOPE_EP: the daemon lets its key
 * reach memory only through the connection of the EP it was last bound on.
 *
 * dat_rmr_bind is a call (docs/host-interface.md section 8): the daemon orders it after the
 * EP's posts, answers with the new rmr_context and completes it on the request EVD, storing
 * BOUND + 1 first; the driver counts the binds it made among the EP's outstanding requests. */
#include "df.h"

static DAT_RETURN create(DAT_PZ_HANDLE pz_handle, DAT_RMR_HANDLE *rmr_handle, bool for_ep)
{
	struct df_pz *pz = df_obj_check(pz_handle, DAT_HANDLE_TYPE_PZ);
	if (!pz)
		return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_PZ);
	if (!rmr_handle)
		return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	uint64_t handle = 0;
	const char *method = for_ep ? "rmr_create_for_ep" : "rmr_create";
	DAT_RETURN ret = df_call_u64(pz->obj.ia, method, df_pack_handle, pz, &handle);
	if (ret != DAT_SUCCESS)
		return ret;
	struct df_rmr *rmr = df_obj_new(pz->obj.ia, sizeof(*rmr), DAT_HANDLE_TYPE_RMR,
					(uint32_t)handle);
	if (!rmr)
		return DF_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	rmr->pz = pz;
	rmr->scope = for_ep ? DAT_RMR_SCOPE_EP : DAT_RMR_SCOPE_PZ;
	*rmr_handle = rmr;
	return DAT_SUCCESS;
}

DAT_RETURN df_rmr_create(DAT_PZ_HANDLE pz_handle, DAT_RMR_HANDLE *rmr_handle)
{
	return create(pz_handle, rmr_handle, false);
}

DAT_RETURN df_rmr_create_for_ep(DAT_PZ_HANDLE pz_handle, DAT_RMR_HANDLE *rmr_handle)
{
	return create(pz_handle, rmr_handle, true);
}

struct bind_args {
	const struct df_rmr *rmr;
	const struct df_lmr *lmr; /* NULL: unbind */
	DAT_LMR_TRIPLET triplet;
	DAT_MEM_PRIV_FLAGS privileges;
	const struct df_ep *ep;
	DAT_RMR_COOKIE cookie;
	DAT_COMPLETION_FLAGS flags;
};

/* proto.calls.RmrBind: [rmr, lmr, triplet, privileges, ep, cookie, flags]; the privileges
 * as asked (DAT_IB_MEM_PRIV_REMOTE_ATOMIC among them: the daemon checks it at the target). */
static void pack_bind(msgpack_packer *pk, const void *arg)
{
	const struct bind_args *a = arg;
	msgpack_pack_array(pk, 7);
	msgpack_pack_unsigned_int(pk, a->rmr->obj.handle);
	msgpack_pack_unsigned_int(pk, a->lmr ? a->lmr->obj.handle : 0);
	msgpack_pack_array(pk, 3);
	msgpack_pack_uint64(pk, a->triplet.virtual_address);
	msgpack_pack_uint64(pk, a->triplet.segment_length);
	msgpack_pack_uint64(pk, a->triplet.lmr_context);
	msgpack_pack_unsigned_int(pk, (unsigned)a->privileges);
	msgpack_pack_unsigned_int(pk, a->ep->obj.handle);
	msgpack_pack_uint64(pk, a->cookie.as_64);
	msgpack_pack_unsigned_int(pk, (unsigned)a->flags);
}

/* The EP's part of a bind (lock held): a request like a post (state, UNSIGNALLED, depth). */
static DAT_RETURN check_bind_ep(struct df_ep *ep, DAT_COMPLETION_FLAGS flags)
{
	DAT_RETURN ret = df_ep_queues(ep);
	if (ret != DAT_SUCCESS)
		return ret;
	DAT_EP_STATE state = df_ep_state(ep);
	if (state != DAT_EP_STATE_CONNECTED && state != DAT_EP_STATE_DISCONNECTED)
		return df_ep_state_error(state);
	if ((flags & DAT_COMPLETION_UNSIGNALLED_FLAG) &&
	    !(ep->attr.request_completion_flags & DAT_COMPLETION_UNSIGNALLED_FLAG))
		return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG8);
	if (df_ep_requests(ep) >= (uint32_t)ep->attr.max_request_dtos)
		return DF_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEP);
	return DAT_SUCCESS;
}

DAT_RETURN df_rmr_bind(DAT_RMR_HANDLE rmr_handle, DAT_LMR_HANDLE lmr_handle,
		       const DAT_LMR_TRIPLET *triplet, DAT_MEM_PRIV_FLAGS privileges,
		       DAT_VA_TYPE va_type, DAT_EP_HANDLE ep_handle, DAT_RMR_COOKIE cookie,
		       DAT_COMPLETION_FLAGS flags, DAT_RMR_CONTEXT *context)
{
	struct df_rmr *rmr = df_obj_check(rmr_handle, DAT_HANDLE_TYPE_RMR);
	if (!rmr)
		return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_RMR);
	struct df_ia *ia = rmr->obj.ia;
	struct bind_args a = {.rmr = rmr, .privileges = privileges, .cookie = cookie,
			      .flags = flags};
	if (lmr_handle != DAT_HANDLE_NULL) {
		a.lmr = df_obj_check(lmr_handle, DAT_HANDLE_TYPE_LMR);
		if (!a.lmr || a.lmr->obj.ia != ia)
			return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_LMR);
		if (!triplet)
			return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
		a.triplet = *triplet;
	}
	if (va_type != DAT_VA_TYPE_VA)
		return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG5);
	struct df_ep *ep = df_obj_check(ep_handle, DAT_HANDLE_TYPE_EP);
	if (!ep || ep->obj.ia != ia)
		return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
	a.ep = ep;
	pthread_mutex_lock(&ia->chan.lock);
	DAT_RETURN ret = check_bind_ep(ep, flags);
	pthread_mutex_unlock(&ia->chan.lock);
	if (ret != DAT_SUCCESS)
		return ret;
	uint64_t ctx = 0;
	ret = df_call_u64(ia, "rmr_bind", pack_bind, &a, &ctx);
	if (ret != DAT_SUCCESS)
		return ret;
	pthread_mutex_lock(&ia->chan.lock);
	ep->binds++;
	rmr->lmr = (struct df_lmr *)a.lmr;
	rmr->triplet = a.triplet;
	rmr->privileges = privileges;
	rmr->va_type = va_type;
	rmr->rmr_context = (DAT_RMR_CONTEXT)ctx;
	pthread_mutex_unlock(&ia->chan.lock);
	if (context)
		*context = rmr->rmr_context;
	return DAT_SUCCESS;
}

DAT_RETURN df_rmr_query(DAT_RMR_HANDLE handle, DAT_RMR_PARAM_MASK mask, DAT_RMR_PARAM *p)
{
	struct df_rmr *rmr = df_obj_check(handle, DAT_HANDLE_TYPE_RMR);
	(void)mask; /* every field is known: all are filled */
	if (!rmr)
		return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_RMR);
	if (!p)
		return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
	pthread_mutex_lock(&rmr->obj.ia->chan.lock);
	p->ia_handle = rmr->obj.ia;
	p->pz_handle = rmr->pz;
	p->lmr_triplet = rmr->triplet;
	p->mem_priv = rmr->privileges;
	p->rmr_context = rmr->rmr_context;
	p->va_type = rmr->va_type;
	p->rmr_scope = rmr->scope;
	pthread_mutex_unlock(&rmr->obj.ia->chan.lock);
	return DAT_SUCCESS;
}

DAT_RETURN df_rmr_free(DAT_RMR_HANDLE handle)
{
	struct df_rmr *rmr = df_obj_check(handle, DAT_HANDLE_TYPE_RMR);
	if (!rmr)
		return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_RMR);
	return df_free_object(&rmr->obj, "rmr_free");
}
