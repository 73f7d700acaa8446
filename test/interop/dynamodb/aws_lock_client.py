#!/usr/bin/python3
# test/interop/dynamodb/aws_lock_client.py: AWS's Java lock client
# (awslabs/amazon-dynamodb-lock-client, AmazonDynamoDBLockClient.java) as the
# interop tests' foreign side. Java is not used here: this script sends that
# client's requests as its source writes them (the same attribute names, condition
# expressions and order of steps), with the client's defaults: no sort key,
# deleteLockOnRelease, a background heartbeat thread. Standard library only.
#
# Usage: aws_lock_client.py HOST:PORT TABLE KEY OWNER LEASE_MS HEARTBEAT_MS [REFRESH_MS]
# Commands on stdin, one a line; one line out per event:
#   create          -> created        (createLockTableInDynamoDB's table)
#   acquire MS      -> held | timeout (acquireLock, MS its additionalTimeToWaitForLock)
#   release         -> released | not-released   (releaseLock)
#   quit
# The heartbeat thread prints "lost" when a heartbeat is refused. With
# AWS_LOCK_CLIENT_TRACE set, every request and answer goes to stderr.
import http.client
import json
import os
import sys
import threading
import time
import uuid

ENDPOINT, TABLE, KEY, OWNER = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
LEASE_MS, HEARTBEAT_MS = int(sys.argv[5]), int(sys.argv[6])
REFRESH_MS = int(sys.argv[7]) if len(sys.argv) > 7 else 1000  # AcquireLockOptions' refreshPeriod
PARTITION_KEY = "key"  # AmazonDynamoDBLockClientOptions.DEFAULT_PARTITION_KEY_NAME
DEFAULT_BUFFER_MS = 1000  # AmazonDynamoDBLockClient.DEFAULT_BUFFER_MS

out_lock = threading.Lock()


def say(line):
    with out_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def millisecond_time():  # LockClientUtils.millisecondTime(): a monotonic clock
    return int(time.monotonic() * 1000)


class ConditionalCheckFailed(Exception):
    pass


class Dynamo:
    """One connection; dynalite checks that requests are signed, not the signature."""

    def __init__(self):
        host, port = ENDPOINT.rsplit(":", 1)
        self.conn = http.client.HTTPConnection(host, int(port), timeout=5)

    def call(self, op, body):
        payload = json.dumps(body)
        headers = {
            "Content-Type": "application/x-amz-json-1.0",
            "X-Amz-Target": "DynamoDB_20120810." + op,
            "X-Amz-Date": time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()),
            "Authorization": "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20240101/us-east-1/dynamodb/aws4_request, "
            "SignedHeaders=host;x-amz-date;x-amz-target, Signature=0",
        }
        try:
            self.conn.request("POST", "/", payload, headers)
            response = self.conn.getresponse()
            text = response.read()
        except (OSError, http.client.HTTPException):
            self.conn.close()
            raise
        answer = json.loads(text) if text else {}
        if os.environ.get("AWS_LOCK_CLIENT_TRACE"):
            sys.stderr.write("%s %s -> %d %s\n" % (op, payload, response.status, text.decode()))
        if response.status != 200:
            if answer.get("__type", "").endswith("ConditionalCheckFailedException"):
                raise ConditionalCheckFailed()
            raise RuntimeError("%s: %s" % (op, text))
        return answer


class Lock:  # LockItem: what the client keeps of a lock it holds
    def __init__(self, rvn, lookup):
        self.record_version_number = rvn
        self.lookup_time = lookup
        self.lease_duration = LEASE_MS

    def is_expired(self):
        return millisecond_time() - self.lookup_time > self.lease_duration


held = None
held_guard = threading.Lock()


def generate_record_version_number():  # generateRecordVersionNumber
    return str(uuid.uuid4())


def create_table(db):
    # createLockTableInDynamoDB: a String hash key, provisioned throughput.
    db.call("CreateTable", {
        "TableName": TABLE,
        "KeySchema": [{"AttributeName": PARTITION_KEY, "KeyType": "HASH"}],
        "AttributeDefinitions": [{"AttributeName": PARTITION_KEY, "AttributeType": "S"}],
        "ProvisionedThroughput": {"ReadCapacityUnits": 5, "WriteCapacityUnits": 5},
    })
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # lockTableExists: ACTIVE
        status = db.call("DescribeTable", {"TableName": TABLE})["Table"]["TableStatus"]
        if status == "ACTIVE":
            return
        time.sleep(0.05)


def get_lock_from_dynamodb(db):
    # getLockFromDynamoDB / readFromDynamoDB: a consistent GetItem; createLockItem
    # takes the lookup time after the read.
    item = db.call("GetItem", {"TableName": TABLE, "Key": {PARTITION_KEY: {"S": KEY}},
                               "ConsistentRead": True}).get("Item")
    if not item:
        return None
    return {
        "rvn": item["recordVersionNumber"]["S"],
        "lease": int(item["leaseDuration"]["S"]),
        "released": "isReleased" in item,
        "lookup": millisecond_time(),
    }


def put_lock(db, item, condition, names, values):
    # putLockItemAndStartSessionMonitor: PutItem of the whole item.
    body = {"TableName": TABLE, "Item": item, "ConditionExpression": condition, "ExpressionAttributeNames": names}
    if values:
        body["ExpressionAttributeValues"] = values
    last_updated = millisecond_time()
    db.call("PutItem", body)
    return Lock(item["recordVersionNumber"]["S"], last_updated)


def acquire_lock(db, additional_ms):
    # acquireLock(AcquireLockOptions) with additionalTimeToWaitForLock = additional_ms.
    global held
    milliseconds_to_wait = additional_ms
    current_time = millisecond_time()
    trying = None
    already_slept_once = False
    while True:
        try:
            existing = get_lock_from_dynamodb(db)
            rvn = generate_record_version_number()
            item = {
                PARTITION_KEY: {"S": KEY},
                "ownerName": {"S": OWNER},
                "leaseDuration": {"S": str(LEASE_MS)},
                "recordVersionNumber": {"S": rvn},
            }
            if existing is None:
                # upsertAndMonitorNewLock: ACQUIRE_LOCK_THAT_DOESNT_EXIST_PK_CONDITION
                return put_lock(db, item, "attribute_not_exists(#pk)", {"#pk": PARTITION_KEY}, None)
            if existing["released"]:
                # upsertAndMonitorReleasedLock: PK_EXISTS_AND_IS_RELEASED_CONDITION
                return put_lock(db, item, "attribute_exists(#pk) AND #ir = :ir",
                                {"#pk": PARTITION_KEY, "#ir": "isReleased"}, {":ir": {"S": "1"}})
            if trying is None:
                trying = existing
                if not already_slept_once:
                    already_slept_once = True
                    milliseconds_to_wait += existing["lease"]
            elif trying["rvn"] == existing["rvn"]:
                if millisecond_time() - trying["lookup"] > trying["lease"]:  # LockItem.isExpired
                    # upsertAndMonitorExpiredLock: PK_EXISTS_AND_RVN_IS_THE_SAME_CONDITION
                    return put_lock(db, item, "attribute_exists(#pk) AND #rvn = :rvn",
                                    {"#pk": PARTITION_KEY, "#rvn": "recordVersionNumber"},
                                    {":rvn": {"S": existing["rvn"]}})
            else:
                trying = existing
        except ConditionalCheckFailed:
            # LockNotGrantedException: thrown out once the wait is over, else retried
            if millisecond_time() - current_time > milliseconds_to_wait:
                return None
        if millisecond_time() - current_time > milliseconds_to_wait:
            return None
        time.sleep(REFRESH_MS / 1000.0)


def heartbeat_thread():
    # run(): sendHeartbeat for each lock held, every heartbeat period.
    global held
    db = Dynamo()
    while True:
        began = millisecond_time()
        with held_guard:
            lock = held
            if lock is not None:
                if lock.is_expired():
                    held = None
                    say("lost")
                else:
                    # sendHeartbeat: UPDATE_LEASE_DURATION_AND_RVN under
                    # PK_EXISTS_AND_OWNER_NAME_SAME_AND_RVN_SAME_CONDITION
                    new_rvn = generate_record_version_number()
                    try:
                        last_update = millisecond_time()
                        db.call("UpdateItem", {
                            "TableName": TABLE,
                            "Key": {PARTITION_KEY: {"S": KEY}},
                            "ConditionExpression": "attribute_exists(#pk) AND #rvn = :rvn AND #on = :on",
                            "UpdateExpression": "SET #ld = :ld, #rvn = :newRvn",
                            "ExpressionAttributeNames": {"#pk": PARTITION_KEY, "#ld": "leaseDuration",
                                                         "#rvn": "recordVersionNumber", "#on": "ownerName"},
                            "ExpressionAttributeValues": {":rvn": {"S": lock.record_version_number},
                                                          ":on": {"S": OWNER}, ":newRvn": {"S": new_rvn},
                                                          ":ld": {"S": str(LEASE_MS)}},
                        })
                        lock.record_version_number = new_rvn
                        lock.lookup_time = last_update
                    except ConditionalCheckFailed:
                        held = None
                        say("lost")
                    except Exception:  # the client logs and heartbeats again next period
                        pass
        time.sleep(max(HEARTBEAT_MS - (millisecond_time() - began), 0) / 1000.0)


def release_lock(db):
    # releaseLock(LockItem) with deleteLockOnRelease: the heartbeat stops first, then
    # DeleteItem under PK_EXISTS_AND_OWNER_NAME_SAME_AND_RVN_SAME_CONDITION.
    global held
    with held_guard:
        lock, held = held, None
    if lock is None:
        return False
    try:
        db.call("DeleteItem", {
            "TableName": TABLE,
            "Key": {PARTITION_KEY: {"S": KEY}},
            "ConditionExpression": "attribute_exists(#pk) AND #rvn = :rvn AND #on = :on",
            "ExpressionAttributeNames": {"#pk": PARTITION_KEY, "#on": "ownerName", "#rvn": "recordVersionNumber"},
            "ExpressionAttributeValues": {":rvn": {"S": lock.record_version_number}, ":on": {"S": OWNER}},
        })
        return True
    except ConditionalCheckFailed:
        return False


def main():
    global held
    db = Dynamo()
    threading.Thread(target=heartbeat_thread, daemon=True).start()
    say("ready")
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        if words[0] == "create":
            create_table(db)
            say("created")
        elif words[0] == "acquire":
            lock = acquire_lock(db, int(words[1]))
            if lock is None:
                say("timeout")
            else:
                with held_guard:
                    held = lock
                say("held")
        elif words[0] == "release":
            say("released" if release_lock(db) else "not-released")
        elif words[0] == "quit":
            break


if __name__ == "__main__":
    main()
