//! The `lock` interface of the `hosted` world: the core's lock ([`ratewindow_core::lock`]) on a
//! `clocked-memory` store (its [`MemoryLocks`], timed by the imported `clock`) or a `redis` store (the
//! core's lock machine, each command run by the host's client through `store-io.run-script`, on the
//! server's clock). `block`'s schedule is the core's [`LockWait`]; this layer only sleeps, through the
//! imported `clock.sleep-ms`.

use std::rc::Rc;

use ratewindow_core::call::{Outcome, Redis};
use ratewindow_core::lock::{check_owner, LockError, LockOp, LockTtl, LockWait, MemoryLocks};

use crate::bindings::exports::ratewindow::engine::{
    clocked_memory::MemoryStoreBorrow,
    errors::{Error, InvalidArgument},
    lock::{self as wit, GuestLock, Lock as LockHandle},
    redis::RedisStoreBorrow,
};
use crate::bindings::ratewindow::engine::clock::{now_ms, sleep_ms};
use crate::clocked::ClockedStore;
use crate::redis::{call_id, run, unexpected, RedisStore};
use crate::Component;

impl wit::Guest for Component {
    type Lock = Lock;
}

/// Where a lock lives.
enum On {
    /// A `clocked-memory` store's table.
    Memory(Rc<MemoryLocks>),
    /// A `redis` store's machine (its options), and its refused prefix if it has one.
    Redis {
        machine: Redis,
        bad_prefix: Option<String>,
    },
}

/// One lock: its store, key, owner token and TTL.
pub struct Lock {
    on: On,
    key: String,
    owner: String,
    ttl: LockTtl,
    ttl_secs: f64,
}

/// A lock argument refused by the core, as the WIT error naming the field (`retry-ms` in WIT's case).
fn refused(e: LockError) -> Error {
    let field = match e.field.name() {
        "retry_ms" => "retry-ms",
        other => other,
    };
    Error::InvalidArgument(InvalidArgument {
        field: field.to_owned(),
        value: e.value,
    })
}

impl Lock {
    fn build(on: On, key: String, ttl: f64, owner: Option<String>) -> Result<Lock, Error> {
        let ttl_checked = LockTtl::from_secs(ttl).map_err(refused)?;
        let owner = match owner {
            Some(owner) => owner,
            None => call_id()?,
        };
        check_owner(&owner).map_err(refused)?;
        Ok(Lock {
            on,
            key,
            owner,
            ttl: ttl_checked,
            ttl_secs: ttl,
        })
    }

    /// Runs one lock operation on the lock's store.
    fn run(&self, op: LockOp) -> Result<Outcome, Error> {
        match &self.on {
            On::Memory(locks) => Ok(locks.run(&op, now_ms())),
            On::Redis {
                bad_prefix: Some(prefix),
                ..
            } => Err(Error::InvalidArgument(InvalidArgument {
                field: "prefix".to_owned(),
                value: prefix.clone(),
            })),
            On::Redis { machine, .. } => Ok(machine.lock(op).drive(run).0?),
        }
    }

    fn yes_no(&self, op: LockOp) -> Result<bool, Error> {
        match self.run(op)? {
            Outcome::Bool(b) => Ok(b),
            other => Err(unexpected(&other)),
        }
    }

    fn try_acquire(&self) -> Result<bool, Error> {
        self.yes_no(LockOp::Acquire {
            key: self.key.clone(),
            owner: self.owner.clone(),
            ttl: self.ttl,
        })
    }
}

impl GuestLock for Lock {
    fn on_memory(
        store: MemoryStoreBorrow<'_>,
        key: String,
        ttl: f64,
        owner: Option<String>,
    ) -> Result<LockHandle, Error> {
        let locks = store.get::<ClockedStore>().locks();
        Lock::build(On::Memory(locks), key, ttl, owner).map(LockHandle::new)
    }

    fn on_redis(
        store: RedisStoreBorrow<'_>,
        key: String,
        ttl: f64,
        owner: Option<String>,
    ) -> Result<LockHandle, Error> {
        let store = store.get::<RedisStore>();
        let on = On::Redis {
            machine: store.machine().clone(),
            bad_prefix: store.bad_prefix().map(str::to_owned),
        };
        Lock::build(on, key, ttl, owner).map(LockHandle::new)
    }

    fn key(&self) -> String {
        self.key.clone()
    }

    fn owner_token(&self) -> String {
        self.owner.clone()
    }

    fn ttl(&self) -> f64 {
        self.ttl_secs
    }

    fn acquire(&self) -> Result<bool, Error> {
        self.try_acquire()
    }

    fn block(&self, seconds: f64, retry_ms: f64) -> Result<(), Error> {
        let wait = LockWait::new(seconds, retry_ms, now_ms()).map_err(refused)?;
        loop {
            if self.try_acquire()? {
                return Ok(());
            }
            match wait.after_refusal(now_ms()) {
                Some(pause) => sleep_ms(pause),
                None => return Err(Error::LockTimeout(self.key.clone())),
            }
        }
    }

    fn release(&self) -> Result<bool, Error> {
        self.yes_no(LockOp::Release {
            key: self.key.clone(),
            owner: self.owner.clone(),
        })
    }

    fn force_release(&self) -> Result<bool, Error> {
        self.yes_no(LockOp::ForceRelease {
            key: self.key.clone(),
        })
    }

    fn owner(&self) -> Result<Option<String>, Error> {
        match self.run(LockOp::Owner {
            key: self.key.clone(),
        })? {
            Outcome::Owner(owner) => Ok(owner),
            other => Err(unexpected(&other)),
        }
    }
}
