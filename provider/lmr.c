/* Registered memory: dat_lmr_create, dat_lmr_query, dat_lmr_free, dat_lmr_sync_rdma_read and
 * dat_lmr_sync_rdma_write.
 *
 * VIRTUAL memory is the program's own (malloc, stack, static, any alignment), SHARED_VIRTUAL
 * its own shared mapping named by a cookie: the daemon reaches either in place with cross-memory
 * attach, so the call names no segment (docs/provider.md). The driver keeps each LMR's range,
 * PZ and privileges to check posts without a call. */
#include <string.h>

#include "df.h"

struct lmr_create_args {
	DAT_MEM_TYPE mem_type;
	uint64_t address; /* VIRTUAL, SHARED_VIRTUAL */
	const char *cookie; /* SHARED_VIRTUAL: DAT_LMR_COOKIE_SIZE bytes */
	uint32_t parent; /* LMR */
	DAT_VLEN length;
	uint32_t pz;
	DAT_MEM_PRIV_FLAGS privileges;
};

/* proto.calls.LmrCreate: [mem_type, segment, offset, address, cookie, parent, length, pz,
 * privileges]; segment "" means the calling process's own memory (shared or not). */
static void pack_lmr_create(msgpack_packer *pk, const void *arg)
{
	const struct lmr_create_args *a = arg;
	msgpack_pack_array(pk, 9);
	msgpack_pack_unsigned_int(pk, (unsigned)a->mem_type);
	msgpack_pack_str(pk, 0);
	msgpack_pack_str_body(pk, "", 0);
	msgpack_pack_unsigned_int(pk, 0);
	msgpack_pack_uint64(pk, a->address);
	if (a->cookie) {
		msgpack_pack_bin(pk, DAT_LMR_COOKIE_SIZE);
		msgpack_pack_bin_body(pk, a->cookie, DAT_LMR_COOKIE_SIZE);
	} else {
		msgpack_pack_nil(pk);
	}
	msgpack_pack_unsigned_int(pk, a->parent);
	msgpack_pack_uint64(pk, a->length);
	msgpack_pack_unsigned_int(pk, a->pz);
	msgpack_pack_unsigned_int(pk, (unsigned)a->privileges);
}

/* The privileges an LMR is registered with: those asked for (DAT_IB_MEM_PRIV_REMOTE_ATOMIC
 * among them, which the daemon checks at an atomic's target), and local read wherever local
 * write is asked (memory one may write locally one may read locally, as on every verbs
 * provider; C programs written for OFED's dapl, Debian's dtest among them, send from buffers
 * registered LOCAL_WRITE only). dat_lmr_query reports what was asked. */
DAT_MEM_PRIV_FLAGS df_granted_privileges(DAT_MEM_PRIV_FLAGS asked)
{
	if (asked & DAT_MEM_PRIV_LOCAL_WRITE_FLAG)
		asked |= DAT_MEM_PRIV_LOCAL_READ_FLAG;
	return asked;
}

/* The LMR of this IA whose lmr_context is ``context`` (lock held), or NULL. */
struct df_lmr *df_lmr_find(struct df_ia *ia, DAT_LMR_CONTEXT context)
{
	for (struct df_obj *o = ia->children; o; o = o->next)
		if (o->type == DAT_HANDLE_TYPE_LMR && ((struct df_lmr *)o)->lmr_context == context)
			return (struct df_lmr *)o;
	return NULL;
}

/* The arguments that need no call (dat_lmr_create's argument numbers). */
static DAT_RETURN check_create(struct df_ia *ia, DAT_MEM_TYPE type, DAT_REGION_DESCRIPTION region,
			       struct df_pz *pz, struct lmr_create_args *a)
{
	if (!pz || pz->obj.ia != ia)
		return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_PZ);
	switch (type) {
	case DAT_MEM_TYPE_VIRTUAL:
		if (!region.for_va)
			return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
		a->address = (uint64_t)(uintptr_t)region.for_va;
		return DAT_SUCCESS;
	case DAT_MEM_TYPE_LMR: {
		struct df_lmr *parent = df_obj_check(region.for_lmr_handle, DAT_HANDLE_TYPE_LMR);
		if (!parent || parent->obj.ia != ia)
			return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_LMR);
		a->parent = parent->obj.handle;
		return DAT_SUCCESS;
	}
	case DAT_MEM_TYPE_SHARED_VIRTUAL: /* the program's own shared mapping, named by a cookie */
		if (!region.for_shared_memory.virtual_address ||
		    !region.for_shared_memory.shared_memory_id)
			return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
		a->address = (uint64_t)(uintptr_t)region.for_shared_memory.virtual_address;
		a->cookie = *region.for_shared_memory.shared_memory_id;
		return DAT_SUCCESS;
	default:
		return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	}
}

DAT_RETURN df_lmr_create(DAT_IA_HANDLE ia_handle, DAT_MEM_TYPE mem_type,
			 DAT_REGION_DESCRIPTION region, DAT_VLEN length, DAT_PZ_HANDLE pz_handle,
			 DAT_MEM_PRIV_FLAGS privileges, DAT_VA_TYPE va_type,
			 DAT_LMR_HANDLE *lmr_handle, DAT_LMR_CONTEXT *lmr_context,
			 DAT_RMR_CONTEXT *rmr_context, DAT_VLEN *registered_length,
			 DAT_VADDR *registered_address)
{
	struct df_ia *ia = df_obj_check(ia_handle, DAT_HANDLE_TYPE_IA);
	if (!ia)
		return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_IA);
	struct df_pz *pz = df_obj_check(pz_handle, DAT_HANDLE_TYPE_PZ);
	struct lmr_create_args a = {.mem_type = mem_type, .length = length,
				    .privileges = df_granted_privileges(privileges)};
	DAT_RETURN ret = check_create(ia, mem_type, region, pz, &a);
	if (ret != DAT_SUCCESS)
		return ret;
	if (va_type != DAT_VA_TYPE_VA)
		return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG7);
	if (!lmr_handle)
		return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG8);
	a.pz = pz->obj.handle;
	struct df_reply *r = NULL;
	ret = df_call(ia, "lmr_create", pack_lmr_create, &a, &r);
	if (ret != DAT_SUCCESS)
		return ret;
	uint64_t out[5] = {0};
	for (uint32_t i = 0; i < 5 && ret == DAT_SUCCESS; i++)
		ret = df_result_u64(r, i, &out[i]);
	df_reply_free(r);
	if (ret != DAT_SUCCESS)
		return ret;
	struct df_lmr *lmr = df_obj_new(ia, sizeof(*lmr), DAT_HANDLE_TYPE_LMR, (uint32_t)out[0]);
	if (!lmr)
		return DF_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	lmr->pz = pz;
	lmr->mem_type = mem_type;
	lmr->region = region;
	lmr->privileges = privileges;
	lmr->granted = a.privileges;
	lmr->va_type = va_type;
	lmr->lmr_context = (DAT_LMR_CONTEXT)out[1];
	lmr->rmr_context = (DAT_RMR_CONTEXT)out[2];
	lmr->length = out[3];
	lmr->address = out[4];
	*lmr_handle = lmr;
	if (lmr_context)
		*lmr_context = lmr->lmr_context;
	if (rmr_context)
		*rmr_context = lmr->rmr_context;
	if (registered_length)
		*registered_length = lmr->length;
	if (registered_address)
		*registered_address = lmr->address;
	return DAT_SUCCESS;
}

DAT_RETURN df_lmr_query(DAT_LMR_HANDLE handle, DAT_LMR_PARAM_MASK mask, DAT_LMR_PARAM *p)
{
	struct df_lmr *lmr = df_obj_check(handle, DAT_HANDLE_TYPE_LMR);
	(void)mask; /* every field is known: all are filled */
	if (!lmr)
		return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_LMR);
	if (!p)
		return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
	p->ia_handle = lmr->obj.ia;
	p->mem_type = lmr->mem_type;
	p->region_desc = lmr->region;
	p->length = lmr->length;
	p->pz_handle = lmr->pz;
	p->mem_priv = lmr->privileges;
	p->va_type = lmr->va_type;
	p->lmr_context = lmr->lmr_context;
	p->rmr_context = lmr->rmr_context;
	p->registered_size = lmr->length;
	p->registered_address = lmr->address;
	return DAT_SUCCESS;
}

/* dat_lmr_free: the daemon refuses while an RMR is bound to it (INVALID_STATE). */
DAT_RETURN df_lmr_free(DAT_LMR_HANDLE handle)
{
	struct df_lmr *lmr = df_obj_check(handle, DAT_HANDLE_TYPE_LMR);
	if (!lmr)
		return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_LMR);
	return df_free_object(&lmr->obj, "lmr_free");
}

struct sync_args {
	bool to_cpu;
	const DAT_LMR_TRIPLET *segments;
	DAT_VLEN n;
};

static void pack_sync(msgpack_packer *pk, const void *arg)
{
	const struct sync_args *a = arg;
	msgpack_pack_array(pk, 2);
	if (a->to_cpu)
		msgpack_pack_true(pk);
	else
		msgpack_pack_false(pk);
	msgpack_pack_array(pk, (uint32_t)a->n);
	for (DAT_VLEN i = 0; i < a->n; i++) {
		msgpack_pack_array(pk, 3);
		msgpack_pack_uint64(pk, a->segments[i].virtual_address);
		msgpack_pack_uint64(pk, a->segments[i].segment_length);
		msgpack_pack_uint64(pk, a->segments[i].lmr_context);
	}
}

/* Every non-empty segment lies in an LMR of this IA (dat_lmr_sync_rdma_*: arg 2). */
static DAT_RETURN check_sync(struct df_ia *ia, const DAT_LMR_TRIPLET *s, DAT_VLEN n)
{
	DAT_RETURN ret = DAT_SUCCESS;
	pthread_mutex_lock(&ia->chan.lock);
	for (DAT_VLEN i = 0; i < n && ret == DAT_SUCCESS; i++) {
		if (!s[i].segment_length)
			continue;
		const struct df_lmr *lmr = df_lmr_find(ia, s[i].lmr_context);
		if (!lmr || s[i].virtual_address < lmr->address ||
		    s[i].segment_length > lmr->length ||
		    s[i].virtual_address - lmr->address > lmr->length - s[i].segment_length)
			ret = DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	}
	pthread_mutex_unlock(&ia->chan.lock);
	return ret;
}

/* Checked here; done by the daemon only when its lmr_sync_req attribute says memory is not
 * coherent (the fabric's default is coherent: then a sync has nothing to do). */
static DAT_RETURN lmr_sync(DAT_IA_HANDLE handle, const DAT_LMR_TRIPLET *segments, DAT_VLEN n,
			   bool to_cpu)
{
	struct df_ia *ia = df_obj_check(handle, DAT_HANDLE_TYPE_IA);
	if (!ia)
		return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_IA);
	if (n && !segments)
		return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	if (n > UINT32_MAX)
		return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
	DAT_RETURN ret = check_sync(ia, segments, n);
	if (ret != DAT_SUCCESS || !df_ia_attr(ia, "lmr_sync_req"))
		return ret;
	struct sync_args a = {to_cpu, segments, n};
	return df_call(ia, "lmr_sync", pack_sync, &a, NULL);
}

DAT_RETURN df_lmr_sync_rdma_read(DAT_IA_HANDLE ia, const DAT_LMR_TRIPLET *segments, DAT_VLEN n)
{
	return lmr_sync(ia, segments, n, false);
}

DAT_RETURN df_lmr_sync_rdma_write(DAT_IA_HANDLE ia, const DAT_LMR_TRIPLET *segments, DAT_VLEN n)
{
	return lmr_sync(ia, segments, n, true);
}
