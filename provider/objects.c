/* Handles: every object starts with struct df_obj and is listed under its IA. */
#include <stdlib.h>

#include "df.h"

/* A new object of ``size`` bytes (zeroed), live and listed under ``ia`` (the IA's lock held). */
void *df_obj_new_locked(struct df_ia *ia, size_t size, DAT_HANDLE_TYPE type, uint32_t handle)
{
	struct df_obj *obj = calloc(1, size);
	if (!obj)
		return NULL;
	obj->provider = ia->obj.provider;
	obj->magic = DF_MAGIC;
	obj->type = type;
	obj->ia = ia;
	obj->handle = handle;
	obj->next = ia->children;
	ia->children = obj;
	return obj;
}

/* The same, taking the IA's lock. */
void *df_obj_new(struct df_ia *ia, size_t size, DAT_HANDLE_TYPE type, uint32_t handle)
{
	pthread_mutex_lock(&ia->chan.lock);
	void *obj = df_obj_new_locked(ia, size, type, handle);
	pthread_mutex_unlock(&ia->chan.lock);
	return obj;
}

/* Unlist and free an object (the IA's lock held); its handle reads as dead until the memory
 * is reused. */
void df_obj_release_locked(struct df_obj *obj)
{
	for (struct df_obj **p = &obj->ia->children; *p; p = &(*p)->next) {
		if (*p == obj) {
			*p = obj->next;
			break;
		}
	}
	obj->magic = DF_DEAD;
	free(obj);
}

/* The same, taking the IA's lock. */
void df_obj_release(struct df_obj *obj)
{
	struct df_ia *ia = obj->ia;
	pthread_mutex_lock(&ia->chan.lock);
	df_obj_release_locked(obj);
	pthread_mutex_unlock(&ia->chan.lock);
}

/* The object behind a handle if it is a live object of ``type``, else NULL. */
void *df_obj_check(const void *handle, DAT_HANDLE_TYPE type)
{
	const struct df_obj *obj = handle;
	if (!obj || obj->magic != DF_MAGIC || obj->type != type)
		return NULL;
	return (void *)obj;
}

/* Free an object the daemon holds too: the call ``method`` [handle], then the handle. A dead
 * daemon frees nothing any more: the handle goes all the same. */
DAT_RETURN df_free_object(struct df_obj *obj, const char *method)
{
	DAT_RETURN ret = df_call(obj->ia, method, df_pack_handle, obj, NULL);
	if (ret != DAT_SUCCESS && DAT_GET_TYPE(ret) != DAT_ABORT)
		return ret;
	df_obj_release(obj);
	return DAT_SUCCESS;
}

/* [handle]: the arguments of the calls that name one object. */
void df_pack_handle(msgpack_packer *pk, const void *obj)
{
	msgpack_pack_array(pk, 1);
	msgpack_pack_unsigned_int(pk, ((const struct df_obj *)obj)->handle);
}

/* The generic handle calls: dat_set_consumer_context, dat_get_consumer_context,
 * dat_get_handle_type. */
static struct df_obj *any_obj(DAT_HANDLE handle)
{
	struct df_obj *obj = handle;
	return obj && obj->magic == DF_MAGIC ? obj : NULL;
}

DAT_RETURN df_set_consumer_context(DAT_HANDLE handle, DAT_CONTEXT context)
{
	struct df_obj *obj = any_obj(handle);
	if (!obj)
		return DF_ERROR(DAT_INVALID_HANDLE, 0);
	obj->context = context;
	return DAT_SUCCESS;
}

DAT_RETURN df_get_consumer_context(DAT_HANDLE handle, DAT_CONTEXT *context)
{
	struct df_obj *obj = any_obj(handle);
	if (!obj)
		return DF_ERROR(DAT_INVALID_HANDLE, 0);
	if (!context)
		return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	*context = obj->context;
	return DAT_SUCCESS;
}

DAT_RETURN df_get_handle_type(DAT_HANDLE handle, DAT_HANDLE_TYPE *type)
{
	struct df_obj *obj = any_obj(handle);
	if (!obj)
		return DF_ERROR(DAT_INVALID_HANDLE, 0);
	if (!type)
		return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	*type = obj->type;
	return DAT_SUCCESS;
}
