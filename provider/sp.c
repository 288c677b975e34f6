/* Service points: dat_psp_create, dat_psp_create_any, dat_psp_query, dat_psp_free,
 * dat_rsp_create, dat_rsp_query, dat_rsp_free. The daemon listens; requests arrive as
 * CONNECTION_REQUEST events on the service point's EVD (events.c makes their CRs). */
#include <sys/random.h>

#include "df.h"

struct sp_args {
	DAT_CONN_QUAL conn_qual;
	const struct df_evd *evd;
	DAT_PSP_FLAGS flags;
	const struct df_ep *ep; /* RSP */
};

/* proto.calls.PspCreate: [conn_qual, evd, flags, backlog]; the backlog is the EVD's length. */
static void pack_psp_create(msgpack_packer *pk, const void *arg)
{
	const struct sp_args *a = arg;
	msgpack_pack_array(pk, 4);
	msgpack_pack_uint64(pk, a->conn_qual);
	msgpack_pack_unsigned_int(pk, a->evd->obj.handle);
	msgpack_pack_unsigned_int(pk, (unsigned)a->flags);
	msgpack_pack_int(pk, a->evd->qlen);
}

/* proto.calls.RspCreate: [conn_qual, ep, evd]. */
static void pack_rsp_create(msgpack_packer *pk, const void *arg)
{
	const struct sp_args *a = arg;
	msgpack_pack_array(pk, 3);
	msgpack_pack_uint64(pk, a->conn_qual);
	msgpack_pack_unsigned_int(pk, a->ep->obj.handle);
	msgpack_pack_unsigned_int(pk, a->evd->obj.handle);
}

/* Make the call and the driver's object for the service point it answers with. */
static DAT_RETURN create(struct df_ia *ia, DAT_HANDLE_TYPE type, const struct sp_args *a,
			 struct df_sp **out)
{
	struct df_reply *r = NULL;
	bool psp = type == DAT_HANDLE_TYPE_PSP;
	DAT_RETURN ret = df_call(ia, psp ? "psp_create" : "rsp_create",
				 psp ? pack_psp_create : pack_rsp_create, a, &r);
	if (ret != DAT_SUCCESS)
		return ret;
	uint64_t handle = 0, state = 0;
	ret = df_result_u64(r, 0, &handle);
	if (ret == DAT_SUCCESS && !psp)
		ret = df_result_u64(r, 2, &state);
	df_reply_free(r);
	if (ret != DAT_SUCCESS)
		return ret;
	struct df_sp *sp = df_obj_new(ia, sizeof(*sp), type, (uint32_t)handle);
	if (!sp)
		return DF_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	sp->conn_qual = a->conn_qual;
	sp->evd = (struct df_evd *)a->evd;
	sp->flags = a->flags;
	sp->ep = (struct df_ep *)a->ep;
	if (sp->ep) {
		pthread_mutex_lock(&ia->chan.lock);
		sp->ep->known = (DAT_EP_STATE)state;
		pthread_mutex_unlock(&ia->chan.lock);
	}
	*out = sp;
	return DAT_SUCCESS;
}

/* The IA and CR EVD arguments every create shares. */
static DAT_RETURN check_ia_evd(DAT_IA_HANDLE ia_handle, DAT_EVD_HANDLE evd_handle,
			       struct df_ia **ia, struct sp_args *a)
{
	*ia = df_obj_check(ia_handle, DAT_HANDLE_TYPE_IA);
	if (!*ia)
		return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_IA);
	a->evd = df_obj_check(evd_handle, DAT_HANDLE_TYPE_EVD);
	if (!a->evd || a->evd->obj.ia != *ia)
		return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_CR);
	return DAT_SUCCESS;
}

DAT_RETURN df_psp_create(DAT_IA_HANDLE ia_handle, DAT_CONN_QUAL conn_qual, DAT_EVD_HANDLE evd,
			 DAT_PSP_FLAGS flags, DAT_PSP_HANDLE *psp_handle)
{
	struct df_ia *ia;
	struct sp_args a = {.conn_qual = conn_qual, .flags = flags};
	DAT_RETURN ret = check_ia_evd(ia_handle, evd, &ia, &a);
	if (ret != DAT_SUCCESS)
		return ret;
	if (!psp_handle)
		return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG5);
	struct df_sp *sp;
	ret = create(ia, DAT_HANDLE_TYPE_PSP, &a, &sp);
	if (ret == DAT_SUCCESS)
		*psp_handle = sp;
	return ret;
}

/* dat_psp_create_any: a conn_qual nobody on the node listens on, tried from a random start in
 * the upper half of the 16-bit range. */
DAT_RETURN df_psp_create_any(DAT_IA_HANDLE ia_handle, DAT_CONN_QUAL *conn_qual,
			     DAT_EVD_HANDLE evd, DAT_PSP_FLAGS flags, DAT_PSP_HANDLE *psp_handle)
{
	if (!conn_qual)
		return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	uint16_t start = 0;
	if (getrandom(&start, sizeof(start), 0) != sizeof(start))
		start = 0;
	DAT_RETURN ret = DF_ERROR(DAT_CONN_QUAL_UNAVAILABLE, 0);
	for (uint32_t i = 0; i < 0x8000; i++) {
		DAT_CONN_QUAL q = 0x8000u + ((start + i) & 0x7fffu);
		ret = df_psp_create(ia_handle, q, evd, flags, psp_handle);
		if (DAT_GET_TYPE(ret) != DAT_CONN_QUAL_IN_USE) {
			if (ret == DAT_SUCCESS)
				*conn_qual = q;
			return ret;
		}
	}
	return DF_ERROR(DAT_CONN_QUAL_UNAVAILABLE, 0);
}

DAT_RETURN df_psp_free(DAT_PSP_HANDLE handle)
{
	struct df_sp *sp = df_obj_check(handle, DAT_HANDLE_TYPE_PSP);
	if (!sp)
		return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_PSP);
	return df_free_object(&sp->obj, "psp_free");
}

DAT_RETURN df_psp_query(DAT_PSP_HANDLE handle, DAT_PSP_PARAM_MASK mask, DAT_PSP_PARAM *p)
{
	struct df_sp *sp = df_obj_check(handle, DAT_HANDLE_TYPE_PSP);
	(void)mask;
	if (!sp)
		return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_PSP);
	if (!p)
		return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
	p->ia_handle = sp->obj.ia;
	p->conn_qual = sp->conn_qual;
	p->evd_handle = sp->evd;
	p->psp_flags = sp->flags;
	return DAT_SUCCESS;
}

DAT_RETURN df_rsp_create(DAT_IA_HANDLE ia_handle, DAT_CONN_QUAL conn_qual, DAT_EP_HANDLE ep,
			 DAT_EVD_HANDLE evd, DAT_RSP_HANDLE *rsp_handle)
{
	struct df_ia *ia;
	struct sp_args a = {.conn_qual = conn_qual};
	DAT_RETURN ret = check_ia_evd(ia_handle, evd, &ia, &a);
	if (ret != DAT_SUCCESS)
		return ret;
	a.ep = df_obj_check(ep, DAT_HANDLE_TYPE_EP);
	if (!a.ep || a.ep->obj.ia != ia)
		return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
	if (!rsp_handle)
		return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG5);
	struct df_sp *sp;
	ret = create(ia, DAT_HANDLE_TYPE_RSP, &a, &sp);
	if (ret == DAT_SUCCESS)
		*rsp_handle = sp;
	return ret;
}

DAT_RETURN df_rsp_free(DAT_RSP_HANDLE handle)
{
	struct df_sp *sp = df_obj_check(handle, DAT_HANDLE_TYPE_RSP);
	if (!sp)
		return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_RSP);
	/* An RSP that took its request listens no more, but its handle is the program's until
	 * dat_rsp_free, as in OFED's dapl (dapltest's performance server frees its RSP once the
	 * connection is up): the daemon keeps it until then. A daemon that is gone (DAT_ABORT)
	 * or does not know the handle is no error: the program's handle is freed all the same. */
	DAT_RETURN ret = df_call(sp->obj.ia, "rsp_free", df_pack_handle, sp, NULL);
	if (ret != DAT_SUCCESS && DAT_GET_TYPE(ret) != DAT_ABORT &&
	    DAT_GET_TYPE(ret) != DAT_INVALID_HANDLE)
		return ret;
	df_obj_release(&sp->obj);
	return DAT_SUCCESS;
}

DAT_RETURN df_rsp_query(DAT_RSP_HANDLE handle, DAT_RSP_PARAM_MASK mask, DAT_RSP_PARAM *p)
{
	struct df_sp *sp = df_obj_check(handle, DAT_HANDLE_TYPE_RSP);
	(void)mask;
	if (!sp)
		return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_RSP);
	if (!p)
		return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
	p->ia_handle = sp->obj.ia;
	p->conn_qual = sp->conn_qual;
	p->evd_handle = sp->evd;
	p->ep_handle = sp->ep;
	return DAT_SUCCESS;
}
