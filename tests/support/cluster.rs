//! A Redis Cluster of harness-started nodes, joined without `redis-cli`.

use std::{
    thread,
    time::{Duration, Instant},
};

use redis::Value;

use super::RedisServer;

const SLOTS: u16 = 16_384;

/// Masters (and optionally replicas) on loopback ports, every slot assigned, killed on drop.
pub struct RedisCluster {
    masters: Vec<RedisServer>,
    replicas: Vec<RedisServer>,
}

impl RedisCluster {
    /// `masters` masters splitting the slots evenly, no replicas.
    pub fn start(masters: usize) -> Self {
        Self::start_with_replicas(masters, 0)
    }

    /// `masters` masters, each with `replicas_per_master` replicas.
    ///
    /// Slots are assigned with `CLUSTER ADDSLOTSRANGE`, nodes joined with `CLUSTER MEET`,
    /// replicas attached with `CLUSTER REPLICATE`; returns once every node reports
    /// `cluster_state:ok` and all nodes agree on which master serves which slots.
    pub fn start_with_replicas(masters: usize, replicas_per_master: usize) -> Self {
        assert!(masters >= 1, "a cluster needs at least one master");
        let cluster = RedisCluster {
            masters: (0..masters).map(|_| start_node()).collect(),
            replicas: (0..masters * replicas_per_master)
                .map(|_| start_node())
                .collect(),
        };
        let per_master = SLOTS as usize / masters;
        for (i, master) in cluster.masters.iter().enumerate() {
            let first = i * per_master;
            let last = if i + 1 == masters {
                SLOTS as usize - 1
            } else {
                first + per_master - 1
            };
            let _: () = redis::cmd("CLUSTER")
                .arg("ADDSLOTSRANGE")
                .arg(first)
                .arg(last)
                .query(&mut master.connection())
                .expect("CLUSTER ADDSLOTSRANGE");
        }
        let mut first = cluster.masters[0].connection();
        for node in cluster.nodes().skip(1) {
            let _: () = redis::cmd("CLUSTER")
                .arg("MEET")
                .arg("127.0.0.1")
                .arg(node.port())
                .query(&mut first)
                .expect("CLUSTER MEET");
        }
        let total = cluster.nodes().count();
        cluster.wait_for("every node to know every other", |nodes| {
            nodes
                .iter()
                .all(|(info, _)| info.contains(&format!("cluster_known_nodes:{total}")))
        });
        for (i, replica) in cluster.replicas.iter().enumerate() {
            let master = &cluster.masters[i / replicas_per_master];
            let id: String = redis::cmd("CLUSTER")
                .arg("MYID")
                .query(&mut master.connection())
                .expect("CLUSTER MYID");
            let _: () = redis::cmd("CLUSTER")
                .arg("REPLICATE")
                .arg(&id)
                .query(&mut replica.connection())
                .expect("CLUSTER REPLICATE");
        }
        cluster.wait_for("cluster_state:ok and one slot map on every node", |nodes| {
            let maps: Vec<_> = nodes.iter().map(|(_, slots)| slot_map(slots)).collect();
            nodes.iter().zip(&maps).all(|((info, _), map)| {
                info.contains("cluster_state:ok")
                    && map.iter().map(|r| u32::from(r.1 - r.0) + 1).sum::<u32>() == u32::from(SLOTS)
                    && map
                        .iter()
                        .all(|r| r.3 == replicas_per_master && !r.2.is_empty())
                    && *map == maps[0]
            })
        });
        cluster
    }

    /// Every node, masters first.
    pub fn nodes(&self) -> impl Iterator<Item = &RedisServer> {
        self.masters.iter().chain(&self.replicas)
    }

    /// The masters.
    pub fn masters(&self) -> &[RedisServer] {
        &self.masters
    }

    /// The replicas, in master order (master 0's first).
    pub fn replicas(&self) -> &[RedisServer] {
        &self.replicas
    }

    /// Kills master `index` (SIGKILL, no goodbye to the cluster bus): its replica is promoted
    /// once the other masters have marked it failed, after `cluster-node-timeout` (2 s).
    pub fn kill_master(&mut self, index: usize) {
        self.masters[index].kill();
    }

    /// Kills master `index` and binds its port with a listener that never accepts, its
    /// backlog filled: a host that is gone, where connections are neither accepted nor
    /// refused (a crashed machine, a deleted pod). The cluster bus port stays closed, so the
    /// other nodes mark it failed after `cluster-node-timeout` (2 s).
    pub fn black_hole_master(&mut self, index: usize) -> BlackHole {
        let port = self.masters[index].port();
        self.masters[index].kill();
        BlackHole::bind(port)
    }

    /// `CONFIG SET name value` on every node.
    pub fn configure_every_node(&self, name: &str, value: &str) {
        for node in self.nodes() {
            let _: () = redis::cmd("CONFIG")
                .arg("SET")
                .arg(name)
                .arg(value)
                .query(&mut node.connection())
                .unwrap_or_else(|e| panic!("CONFIG SET {name} {value}: {e}"));
        }
    }

    /// Adds an empty master (no slots), as before a reshard onto a new node; answers its
    /// index among [`masters`](Self::masters) once every node knows it.
    pub fn add_master(&mut self) -> usize {
        let node = start_node();
        let _: () = redis::cmd("CLUSTER")
            .arg("MEET")
            .arg("127.0.0.1")
            .arg(node.port())
            .query(&mut self.masters[0].connection())
            .expect("CLUSTER MEET");
        self.masters.push(node);
        let total = self.nodes().count();
        self.wait_for("every node to know the new master", |nodes| {
            nodes.iter().all(|(info, _)| {
                info.contains(&format!("cluster_known_nodes:{total}"))
                    && info.contains("cluster_state:ok")
            })
        });
        self.masters.len() - 1
    }

    /// Starts moving `slot` to the next master, as `redis-cli --cluster reshard` does: the
    /// target IMPORTING, the source MIGRATING (no key moved yet; [`move_keys`] moves them).
    /// Answers the source's and the target's indexes among [`masters`](Self::masters).
    ///
    /// [`move_keys`]: Self::move_keys
    pub fn begin_migration(&self, slot: u16) -> (usize, usize) {
        let source = self.holder(slot);
        self.begin_migration_to(slot, (source + 1) % self.masters.len())
    }

    /// Starts moving `slot` to master `target` (see [`begin_migration`](Self::begin_migration)).
    pub fn begin_migration_to(&self, slot: u16, target: usize) -> (usize, usize) {
        let source = self.holder(slot);
        let mut conns: Vec<redis::Connection> =
            self.masters.iter().map(|m| m.connection()).collect();
        let (source_id, target_id) = (node_id(&mut conns[source]), node_id(&mut conns[target]));
        set_slot(&mut conns[target], slot, "IMPORTING", &source_id);
        set_slot(&mut conns[source], slot, "MIGRATING", &target_id);
        (source, target)
    }

    /// The master holding keys of `slot`.
    fn holder(&self, slot: u16) -> usize {
        self.masters
            .iter()
            .position(|m| {
                let n: u64 = redis::cmd("CLUSTER")
                    .arg("COUNTKEYSINSLOT")
                    .arg(slot)
                    .query(&mut m.connection())
                    .unwrap();
                n > 0
            })
            .expect("a master holds a key of the slot")
    }

    /// MIGRATEs every key of `slot` from master `source` to master `target`: from now on the
    /// source answers `ASK` for them.
    pub fn move_keys(&self, slot: u16, (source, target): (usize, usize)) {
        let masters = self.masters();
        let mut conn = masters[source].connection();
        let keys: Vec<String> = redis::cmd("CLUSTER")
            .arg("GETKEYSINSLOT")
            .arg(slot)
            .arg(100)
            .query(&mut conn)
            .unwrap();
        for key in &keys {
            let reply: redis::Value = redis::cmd("MIGRATE")
                .arg("127.0.0.1")
                .arg(masters[target].port())
                .arg(key)
                .arg(0)
                .arg(5000)
                .query(&mut conn)
                .unwrap_or_else(|e| panic!("MIGRATE {key}: {e}"));
            assert_eq!(reply, redis::Value::Okay, "MIGRATE {key}");
        }
    }

    /// Hands `slot` over to the master at `target`, on every master (the end of a reshard).
    pub fn hand_over(&self, slot: u16, target: usize) {
        let target_id = node_id(&mut self.masters()[target].connection());
        for master in self.masters() {
            set_slot(&mut master.connection(), slot, "NODE", &target_id);
        }
    }

    /// Makes master `index` give `port` (a proxy's, say) as its address to clients (in
    /// `CLUSTER SLOTS` and redirects), its cluster bus staying direct; returns once every
    /// node's slot map names it there. Seed a client with the other masters' URLs.
    pub fn announce_master_at(&self, index: usize, port: u16) {
        let master = &self.masters[index];
        let mut conn = master.connection();
        for (name, value) in [
            ("cluster-announce-bus-port", master.port() + 10_000),
            ("cluster-announce-port", port),
        ] {
            let _: () = redis::cmd("CONFIG")
                .arg("SET")
                .arg(name)
                .arg(value)
                .query(&mut conn)
                .unwrap_or_else(|e| panic!("CONFIG SET {name} {value}: {e}"));
        }
        let announced = format!("127.0.0.1:{port}");
        self.wait_for("every node to name the announced address", |nodes| {
            nodes
                .iter()
                .all(|(_, slots)| slot_map(slots).iter().any(|range| range.2 == announced))
        });
    }

    /// One URL per master, to seed a cluster client.
    pub fn urls(&self) -> Vec<String> {
        self.masters.iter().map(RedisServer::url).collect()
    }

    /// Waits (at most 30 s) until `ready` holds for one pass of `(CLUSTER INFO, CLUSTER
    /// SLOTS)` over every node.
    fn wait_for(&self, what: &str, ready: impl Fn(&[(String, Value)]) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let pass: Vec<(String, Value)> = self
                .nodes()
                .map(|node| {
                    let mut conn = node.connection();
                    let info: String = redis::cmd("CLUSTER")
                        .arg("INFO")
                        .query(&mut conn)
                        .expect("CLUSTER INFO");
                    let slots: Value = redis::cmd("CLUSTER")
                        .arg("SLOTS")
                        .query(&mut conn)
                        .expect("CLUSTER SLOTS");
                    (info, slots)
                })
                .collect();
            if ready(&pass) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the test cluster never reached: {what}"
            );
            thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A loopback port where a connection is never accepted nor refused: a listener that never
/// accepts, with its backlog full, so a new connection's handshake is never answered.
pub struct BlackHole {
    _listener: std::net::TcpListener,
    _queued: Vec<std::net::TcpStream>,
}

impl BlackHole {
    fn bind(port: u16) -> BlackHole {
        let address = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        let listener = std::net::TcpListener::bind(address)
            .unwrap_or_else(|e| panic!("binding the black hole on port {port}: {e}"));
        let mut queued = Vec::new();
        loop {
            match std::net::TcpStream::connect_timeout(&address, Duration::from_millis(200)) {
                Ok(stream) => queued.push(stream),
                Err(e) if e.kind() == std::io::ErrorKind::TimedOut => break,
                Err(e) => panic!("filling the black hole's backlog: {e}"),
            }
            assert!(
                queued.len() < 10_000,
                "the black hole's backlog never filled"
            );
        }
        BlackHole {
            _listener: listener,
            _queued: queued,
        }
    }
}

/// `CLUSTER SLOTS` as sorted `(first, last, master "ip:port", replica count)`.
fn slot_map(slots: &Value) -> Vec<(u16, u16, String, usize)> {
    let Value::Array(ranges) = slots else {
        return Vec::new();
    };
    let mut map: Vec<_> = ranges
        .iter()
        .filter_map(|range| {
            let Value::Array(fields) = range else {
                return None;
            };
            let (Some(Value::Int(first)), Some(Value::Int(last)), Some(Value::Array(master))) =
                (fields.first(), fields.get(1), fields.get(2))
            else {
                return None;
            };
            let ip = match master.first() {
                Some(Value::BulkString(ip)) => String::from_utf8_lossy(ip).into_owned(),
                _ => String::new(),
            };
            let port = match master.get(1) {
                Some(Value::Int(port)) => *port,
                _ => 0,
            };
            let address = if ip.is_empty() {
                String::new()
            } else {
                format!("{ip}:{port}")
            };
            Some((*first as u16, *last as u16, address, fields.len() - 3))
        })
        .collect();
    map.sort();
    map
}

/// Whether `node` reports `cluster_state:ok` and lists itself as the master of slot 0
/// (master 0's first slot).
pub fn serves_slot_zero(node: &RedisServer) -> bool {
    let Ok(mut conn) = redis::Client::open(node.url()).and_then(|c| c.get_connection()) else {
        return false;
    };
    let info: String = redis::cmd("CLUSTER")
        .arg("INFO")
        .query(&mut conn)
        .unwrap_or_default();
    let nodes: String = redis::cmd("CLUSTER")
        .arg("NODES")
        .query(&mut conn)
        .unwrap_or_default();
    info.contains("cluster_state:ok")
        && nodes.lines().any(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            fields
                .get(2)
                .is_some_and(|flags| flags.contains("myself") && flags.contains("master"))
                && fields.iter().skip(8).any(|range| range.starts_with("0-"))
        })
}

/// Redis Cluster's slot of `key`: CRC16 (XMODEM) of its hash tag, modulo 16384.
pub fn key_slot(key: &str) -> u16 {
    let tag = key
        .find('{')
        .and_then(|start| {
            let rest = &key[start + 1..];
            rest.find('}').map(|end| &rest[..end])
        })
        .filter(|tag| !tag.is_empty())
        .unwrap_or(key);
    let mut crc: u16 = 0;
    for byte in tag.bytes() {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

fn node_id(conn: &mut redis::Connection) -> String {
    redis::cmd("CLUSTER").arg("MYID").query(conn).unwrap()
}

fn set_slot(conn: &mut redis::Connection, slot: u16, state: &str, node: &str) {
    let _: () = redis::cmd("CLUSTER")
        .arg("SETSLOT")
        .arg(slot)
        .arg(state)
        .arg(node)
        .query(conn)
        .unwrap_or_else(|e| panic!("CLUSTER SETSLOT {slot} {state}: {e}"));
}

/// A cluster node on a free loopback port (and bus port).
fn start_node() -> RedisServer {
    // The config file name is relative to --dir, which is the node's own temp dir.
    let args = [
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        "nodes.conf",
        "--cluster-node-timeout",
        "2000",
        // Replicas sync at once instead of after the default 5 s, and show in CLUSTER SLOTS
        // (which hides replicas at offset 0) after the first replication ping, 1 s instead
        // of 10 s.
        "--repl-diskless-sync-delay",
        "0",
        "--repl-ping-replica-period",
        "1",
    ]
    .map(String::from);
    RedisServer::start_with(&args, true)
}
