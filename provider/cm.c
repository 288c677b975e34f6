/* Connection management of an EP: dat_ep_connect, dat_ep_dup_connect, dat_ep_disconnect,
 * dat_ep_reset. The daemons run the protocol; the outcome arrives as a connection event
 * (events.c). */
#include <arpa/inet.h>
#include <string.h>

#include "df.h"

struct connect_args {
	const struct df_ep *ep;
	char host[INET6_ADDRSTRLEN];
	uint16_t port;
	DAT_CONN_QUAL conn_qual;
	DAT_TIMEOUT timeout;
	const void *data;
	DAT_COUNT size;
};

/* proto.calls.EpConnect: [ep, host, port, conn_qual, timeout_us, private_data]. */
static void pack_connect(msgpack_packer *pk, const void *arg)
{
	const struct connect_args *a = arg;
	msgpack_pack_array(pk, 6);
	msgpack_pack_unsigned_int(pk, a->ep->obj.handle);
	msgpack_pack_str_with_body(pk, a->host, strlen(a->host));
	msgpack_pack_unsigned_int(pk, a->port);
	msgpack_pack_uint64(pk, a->conn_qual);
	msgpack_pack_unsigned_int(pk, a->timeout);
	msgpack_pack_bin(pk, (size_t)a->size);
	msgpack_pack_bin_body(pk, a->data, (size_t)a->size);
}

/* The peer's host and port from a sockaddr. A port of 0 (a program passing what getaddrinfo
 * gave for a host name, as dtest does) means the port of this node's own daemon: the nodes
 * of a fabric listen on one port at their several addresses. */
static bool remote_of(const struct df_ep *ep, const struct sockaddr *sa, struct connect_args *a)
{
	const struct sockaddr_in *own = (const struct sockaddr_in *)&ep->obj.ia->address;
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *sin = (const struct sockaddr_in *)sa;
		inet_ntop(AF_INET, &sin->sin_addr, a->host, sizeof(a->host));
		a->port = ntohs(sin->sin_port);
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)sa;
		inet_ntop(AF_INET6, &sin6->sin6_addr, a->host, sizeof(a->host));
		a->port = ntohs(sin6->sin6_port);
	} else {
		return false;
	}
	if (!a->port)
		a->port = ntohs(own->sin_port);
	return true;
}

DAT_RETURN df_ep_connect(DAT_EP_HANDLE handle, DAT_IA_ADDRESS_PTR remote, DAT_CONN_QUAL conn_qual,
			 DAT_TIMEOUT timeout, DAT_COUNT size, const DAT_PVOID data, DAT_QOS qos,
			 DAT_CONNECT_FLAGS flags)
{
	struct df_ep *ep = df_obj_check(handle, DAT_HANDLE_TYPE_EP);
	if (!ep)
		return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
	struct connect_args a = {.ep = ep, .conn_qual = conn_qual, .timeout = timeout,
				 .data = data, .size = size};
	if (!remote || !remote_of(ep, remote, &a))
		return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	if (!timeout)
		return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4);
	if (size < 0 || size > DF_MAX_PRIVATE_DATA)
		return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG5);
	if (size && !data)
		return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG6);
	if (qos != DAT_QOS_BEST_EFFORT)
		return DF_ERROR(DAT_MODEL_NOT_SUPPORTED, 0); /* as OFED's dapl: best effort only */
	if (flags & ~(DAT_CONNECT_DEFAULT_FLAG | DAT_CONNECT_MULTIPATH_FLAG))
		return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG8);
	DAT_RETURN ret = df_call(ep->obj.ia, "ep_connect", pack_connect, &a, NULL);
	if (ret == DAT_SUCCESS) {
		pthread_mutex_lock(&ep->obj.ia->chan.lock);
		memcpy(&ep->remote_address, remote,
		       remote->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
						     : sizeof(struct sockaddr_in));
		((struct sockaddr_in *)&ep->remote_address)->sin_port = htons(a.port);
		ep->remote_port_qual = conn_qual;
		pthread_mutex_unlock(&ep->obj.ia->chan.lock);
	}
	return ret;
}

DAT_RETURN df_ep_disconnect(DAT_EP_HANDLE handle, DAT_CLOSE_FLAGS flags)
{
	struct df_ep *ep = df_obj_check(handle, DAT_HANDLE_TYPE_EP);
	if (!ep)
		return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
	if (flags != DAT_CLOSE_ABRUPT_FLAG && flags != DAT_CLOSE_GRACEFUL_FLAG)
		return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	struct df_pair args = {ep->obj.handle, (uint64_t)flags};
	return df_call(ep->obj.ia, "ep_disconnect", df_pack_pair, &args, NULL);
}

DAT_RETURN df_ep_reset(DAT_EP_HANDLE handle)
{
	struct df_ep *ep = df_obj_check(handle, DAT_HANDLE_TYPE_EP);
	if (!ep)
		return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
	return df_call(ep->obj.ia, "ep_reset", df_pack_handle, ep, NULL);
}

struct dup_args {
	const struct df_ep *ep, *dup;
	DAT_TIMEOUT timeout;
	const void *data;
	DAT_COUNT size;
};

/* proto.calls.EpDupConnect: [ep, dup, timeout_us, private_data]. */
static void pack_dup_connect(msgpack_packer *pk, const void *arg)
{
	const struct dup_args *a = arg;
	msgpack_pack_array(pk, 4);
	msgpack_pack_unsigned_int(pk, a->ep->obj.handle);
	msgpack_pack_unsigned_int(pk, a->dup->obj.handle);
	msgpack_pack_unsigned_int(pk, a->timeout);
	msgpack_pack_bin(pk, (size_t)a->size);
	msgpack_pack_bin_body(pk, a->data, (size_t)a->size);
}

/* dat_ep_dup_connect: to the remote address and conn_qual the CONNECTED ``dup`` EP connected
 * to (the daemon knows them; an EP that accepted its connection names no conn_qual:
 * DAT_MODEL_NOT_SUPPORTED). */
DAT_RETURN df_ep_dup_connect(DAT_EP_HANDLE handle, DAT_EP_HANDLE dup_handle, DAT_TIMEOUT timeout,
			     DAT_COUNT size, const DAT_PVOID data, DAT_QOS qos)
{
	struct df_ep *ep = df_obj_check(handle, DAT_HANDLE_TYPE_EP);
	struct df_ep *dup = df_obj_check(dup_handle, DAT_HANDLE_TYPE_EP);
	if (!ep || !dup || dup->obj.ia != ep->obj.ia)
		return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
	if (!timeout)
		return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
	if (size < 0 || size > DF_MAX_PRIVATE_DATA)
		return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4);
	if (size && !data)
		return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG5);
	if (qos != DAT_QOS_BEST_EFFORT)
		return DF_ERROR(DAT_MODEL_NOT_SUPPORTED, 0);
	struct dup_args a = {.ep = ep, .dup = dup, .timeout = timeout, .data = data, .size = size};
	DAT_RETURN ret = df_call(ep->obj.ia, "ep_dup_connect", pack_dup_connect, &a, NULL);
	if (ret == DAT_SUCCESS) {
		pthread_mutex_lock(&ep->obj.ia->chan.lock);
		ep->remote_address = dup->remote_address;
		ep->remote_port_qual = dup->remote_port_qual;
		pthread_mutex_unlock(&ep->obj.ia->chan.lock);
	}
	return ret;
}
