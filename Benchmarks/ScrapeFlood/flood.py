"""Floods an HTTP/1.1 endpoint with GET requests on keep-alive connections until killed.

    flood.py PORT PATH CONNECTIONS RATE_PER_CONNECTION COUNT_FILE   (rate 0: as fast as possible)

Writes the number of answered requests to COUNT_FILE every second. A closed or refused
connection is reopened, so refusals cost the flood nothing but time.
"""
import socket
import sys
import threading
import time

port, path, connections, rate, count_file = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
request = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
answered = [0] * connections


def read_response(conn, buffer):
    while b"\r\n\r\n" not in buffer:
        chunk = conn.recv(65536)
        if not chunk:
            raise ConnectionError("closed")
        buffer += chunk
    head, _, rest = buffer.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(rest) < length:
        chunk = conn.recv(65536)
        if not chunk:
            raise ConnectionError("closed")
        rest += chunk
    return rest[length:]


def client(index):
    while True:
        try:
            conn = socket.create_connection(("127.0.0.1", port), timeout=5)
            buffer = b""
            while True:
                conn.sendall(request)
                buffer = read_response(conn, buffer)
                answered[index] += 1
                if rate > 0:
                    time.sleep(1.0 / rate)
        except OSError:
            time.sleep(0.01)
        except ConnectionError:
            pass


for i in range(connections):
    threading.Thread(target=client, args=(i,), daemon=True).start()
while True:
    time.sleep(1)
    with open(count_file, "w") as out:
        out.write(f"{sum(answered)}\n")
