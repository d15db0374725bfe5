/*
 * rft_notify.h - telling the service manager how the daemon stands.
 *
 * systemd starts a Type=notify service with $NOTIFY_SOCKET naming a
 * datagram socket: a path, or "@name" in the abstract namespace.  The
 * service sends it newline-separated assignments: READY=1 once it serves,
 * STATUS=... for `systemctl status`, STOPPING=1 when it begins to stop.
 * systemd keeps the protocol stable for programs that speak it without
 * libsystemd (sd_notify(3), "Notes"), which is what this does: a socket
 * and one sendto() per message.
 *
 * Without $NOTIFY_SOCKET (not started by systemd, or by a unit of another
 * type) nothing is sent and the call succeeds.
 */
#ifndef RFT_NOTIFY_H
#define RFT_NOTIFY_H

/*
 * Send @fmt's message, whole, to $NOTIFY_SOCKET.  0 when sent or when there
 * is no socket to send to; -errno when it could not be (the daemon goes on:
 * the service manager's timeout says the rest).
 */
int rft_notify(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif /* RFT_NOTIFY_H */
