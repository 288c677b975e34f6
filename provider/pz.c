/* Protection zones: dat_pz_create, dat_pz_query, dat_pz_free. */
#include "df.h"

DAT_RETURN df_pz_create(DAT_IA_HANDLE ia_handle, DAT_PZ_HANDLE *pz_handle)
{
	struct df_ia *ia = df_obj_check(ia_handle, DAT_HANDLE_TYPE_IA);
	if (!ia)
		return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_IA);
	if (!pz_handle)
		return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	uint64_t handle = 0;
	DAT_RETURN ret = df_call_u64(ia, "pz_create", NULL, NULL, &handle);
	if (ret != DAT_SUCCESS)
		return ret;
	struct df_pz *pz = df_obj_new(ia, sizeof(*pz), DAT_HANDLE_TYPE_PZ, (uint32_t)handle);
	if (!pz)
		return DF_ERROR(DAT_INSUFFICIENT_RESOURCES, 0);
	*pz_handle = pz;
	return DAT_SUCCESS;
}

/* dat_pz_free: the daemon refuses while an EP, LMR or RMR uses the PZ (INVALID_STATE). */
DAT_RETURN df_pz_free(DAT_PZ_HANDLE handle)
{
	struct df_pz *pz = df_obj_check(handle, DAT_HANDLE_TYPE_PZ);
	if (!pz)
		return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_PZ);
	return df_free_object(&pz->obj, "pz_free");
}

DAT_RETURN df_pz_query(DAT_PZ_HANDLE handle, DAT_PZ_PARAM_MASK mask, DAT_PZ_PARAM *param)
{
	struct df_pz *pz = df_obj_check(handle, DAT_HANDLE_TYPE_PZ);
	(void)mask;
	if (!pz)
		return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_PZ);
	if (!param)
		return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
	param->ia_handle = pz->obj.ia;
	return DAT_SUCCESS;
}

/* [handle, value]: the arguments of the calls that name one object and one value. */
void df_pack_pair(msgpack_packer *pk, const void *arg)
{
	const struct df_pair *v = arg;
	msgpack_pack_array(pk, 2);
	msgpack_pack_unsigned_int(pk, v->handle);
	msgpack_pack_uint64(pk, v->value);
}
