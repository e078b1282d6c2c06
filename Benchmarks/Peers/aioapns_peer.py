"""aioapns as a peer: sends N notifications to apns-mock with token auth, as many at once as
--concurrency, and prints one line: result rate=… cpu_us=… peak_rss_kb=… ok=…

usage: aioapns_peer.py PORT CA_FILE KEY_FILE KEY_ID TEAM_ID TOPIC [--count 20000] [--concurrency 1000]
aioapns connects to Apple's hosts only; the development host is pointed at the mock here.
"""
import asyncio
import resource
import ssl
import sys
import time

from aioapns import APNs, NotificationRequest, PushType
from aioapns.connection import APNsDevelopmentClientProtocol

PAYLOAD = {
    "aps": {"alert": {"title": "Spring sale", "body": "20% off everything in the store today only"}, "sound": "default", "badge": 1},
    "campaign": "spring-2026",
    "offer": "SALE20",
}


async def main(port, ca_file, key_file, key_id, team_id, topic, count, concurrency):
    APNsDevelopmentClientProtocol.APNS_SERVER = "127.0.0.1"
    APNsDevelopmentClientProtocol.APNS_PORT = port
    with open(key_file) as f:
        key = f.read()
    context = ssl.create_default_context(cafile=ca_file)
    context.set_alpn_protocols(["h2"])
    client = APNs(key=key, key_id=key_id, team_id=team_id, topic=topic, use_sandbox=True,
                  ssl_context=context, max_connections=4)
    ok = 0
    next_index = 0

    async def worker():
        nonlocal ok, next_index
        while next_index < count:
            index = next_index
            next_index += 1
            request = NotificationRequest(device_token="%064x" % (index * 2654435761 + 1), message=PAYLOAD,
                                          push_type=PushType.ALERT, priority=10)
            result = await client.send_notification(request)
            if result.is_successful:
                ok += 1

    cpu_before = resource.getrusage(resource.RUSAGE_SELF)
    started = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    seconds = time.monotonic() - started
    cpu_after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (cpu_after.ru_utime - cpu_before.ru_utime) + (cpu_after.ru_stime - cpu_before.ru_stime)
    print("result rate=%.0f cpu_us=%.1f peak_rss_kb=%d ok=%d requests=%d" %
          (count / seconds, cpu * 1e6 / count, cpu_after.ru_maxrss, ok, count))


if __name__ == "__main__":
    args = sys.argv[1:]
    options = {"--count": 20000, "--concurrency": 1000}
    for name in options:
        if name in args:
            i = args.index(name)
            options[name] = int(args[i + 1])
            del args[i:i + 2]
    if len(args) != 6:
        sys.exit(__doc__)
    port, ca, key, kid, team, topic = args
    asyncio.run(main(int(port), ca, key, kid, team, topic, options["--count"], options["--concurrency"]))
