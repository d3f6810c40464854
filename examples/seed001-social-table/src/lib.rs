//! # Seed 001 on weft-store: a single-table social-media design
//!
//! Seed 001 is a DynamoDB single-table design: one table keyed by `PK`/`SK` holding
//! users (ActivityPub Person or Group actors), posts, follows and likes, two global
//! secondary indexes (GSI1 by user, GSI2 by day), transactions that write an item and
//! bump counters atomically, a conditional put that rejects duplicate likes, and
//! per-user feed entries with a 30-day TTL.
//!
//! Here the table is one column family whose families carry the entity type in a
//! prefix byte (the `USER#`/`POST#` part of `PK` and the `SK` kind), and each GSI is a
//! column family of its own whose rows are written in the same atomic batch as the
//! item they index — weft-store has no automatic index maintenance, so the batch *is*
//! the GSI projection:
//!
//! | seed item | family | key | value |
//! |---|---|---|---|
//! | `USER#u` / `PROFILE` | [`ProfileItem`] (main 0x01) | user (Text) | [`Profile`] with its counters |
//! | `USER#u` / `FOLLOWING#v` | [`FollowingItem`] (main 0x02) | user ‖ followed (Text) | [`Follow`] |
//! | `POST#p` / `METADATA` | [`PostItem`] (main 0x03) | post (Text) | [`Post`] with `likes_count` |
//! | `POST#p` / `LIKE#u` | [`LikeItem`] (main 0x04) | post ‖ user (Text) | [`Like`] |
//! | GSI1 `USER#v` / `FOLLOWER#u` | [`FollowerEntry`] (gsi1 0x01) | followed ‖ follower | presence |
//! | GSI1 `USER#u` / `POST#ts#p` | [`UserPostEntry`] (gsi1 0x02) | user ‖ created ms (BE) ‖ post | presence |
//! | GSI1 `USER#u` / `LIKE#ts#p` | [`UserLikeEntry`] (gsi1 0x03) | user ‖ created ms ‖ post | presence |
//! | GSI2 `TIMELINE#day` / `ts#p` | [`TimelineEntry`] (gsi2 0x01) | day (u32 BE) ‖ created ms ‖ post | presence |
//! | GSI2 `FOLLOW_ACTIVITY#day` / `ts#u#v` | [`FollowActivityEntry`] (gsi2 0x02) | day ‖ created ms ‖ follower ‖ followed | presence |
//! | `FEED#u` / `ts#p` (TTL 30 days) | [`FeedEntry`] (feed) | user ‖ created ms ‖ post | [`FeedItem`] with its expiry |
//!
//! Counters live in the profile and post items, as in the seed, and every write that
//! changes one is conditional on the item's current bytes (`require_value`) and on the
//! absence or presence of the row it adds or removes, retried on conflict. A duplicate
//! like or follow therefore fails as a whole, and with any number of concurrent writers
//! every counter equals the rows it counts. Feed entries carry their expiry; reads hide
//! expired ones, and the feed column's compaction filter, which reads the time from the
//! store's [`Clock`], reclaims them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use borsh::{BorshDeserialize, BorshSerialize};
use weft_store::{
    columns, keys, Backend, BorshCodec, ColumnOptions, MemoryBackend, PrefixBy, Read, RocksBackend, RocksConfig, Store,
    StoreError, Text, Unit,
};

/// Feed entries expire this long after the post they carry was created.
pub const FEED_TTL_MS: u64 = 30 * DAY_MS;

/// One day in milliseconds (the timeline's partition width).
pub const DAY_MS: u64 = 86_400_000;

/// How many times a write whose preconditions a concurrent writer invalidated is retried.
pub const MAX_ATTEMPTS: usize = 10_000;

/// Feed rows written per batch when a post fans out to its author's followers.
pub const FAN_OUT_BATCH: usize = 256;

columns! {
    /// The single table, its two GSIs and the feed, one column family each.
    pub enum Table: version 1, meta Meta {
        /// weft's bookkeeping (the schema version row).
        Meta => "meta", ColumnOptions::point();
        /// The table: profiles, follows, posts and likes, by entity prefix byte.
        Main => "main", ColumnOptions::point_and_scan(1);
        /// GSI1: user-based queries (followers, a user's posts, a user's likes).
        Gsi1 => "gsi1", ColumnOptions::scan(1);
        /// GSI2: date-partitioned queries (the public timeline, follow activity); prefix byte + day.
        Gsi2 => "gsi2", ColumnOptions::scan(5);
        /// Pre-computed feeds; expired entries are dropped at compaction (wall clock here; see
        /// [`column_options`] for a store with its own clock).
        Feed => "feed", feed_options(Clock::System);
    }
}

keys! {
    columns Table;
    /// `PK USER#{user}`, `SK PROFILE`.
    pub struct ProfileItem in Main [0x01] { ; user: Text } => BorshCodec<Profile>;
    /// `PK USER#{user}`, `SK FOLLOWING#{followed}`.
    pub struct FollowingItem in Main [0x02] { ; user: Text, followed: Text } => BorshCodec<Follow>;
    /// `PK POST#{post}`, `SK METADATA`.
    pub struct PostItem in Main [0x03] { ; post: Text } => BorshCodec<Post>;
    /// `PK POST#{post}`, `SK LIKE#{user}`.
    pub struct LikeItem in Main [0x04] { ; post: Text, user: Text } => BorshCodec<Like>;
    /// GSI1 `USER#{user}` / `FOLLOWER#{follower}`.
    pub struct FollowerEntry in Gsi1 [0x01] { ; user: Text, follower: Text } => Unit;
    /// GSI1 `USER#{user}` / `POST#{created}#{post}`.
    pub struct UserPostEntry in Gsi1 [0x02] { ; user: Text, created_ms: u64, post: Text } => Unit;
    /// GSI1 `USER#{user}` / `LIKE#{created}#{post}`.
    pub struct UserLikeEntry in Gsi1 [0x03] { ; user: Text, created_ms: u64, post: Text } => Unit;
    /// GSI2 `TIMELINE#{day}` / `{created}#{post}`.
    pub struct TimelineEntry in Gsi2 [0x01] { day: u32, created_ms: u64 ; post: Text } => Unit;
    /// GSI2 `FOLLOW_ACTIVITY#{day}` / `{created}#{follower}#{followed}`.
    pub struct FollowActivityEntry in Gsi2 [0x02] { day: u32, created_ms: u64 ; follower: Text, followed: Text } => Unit;
    /// `PK FEED#{user}`, `SK {created}#{post}`.
    pub struct FeedEntry in Feed { ; user: Text, created_ms: u64, post: Text } => BorshCodec<FeedItem>;
}

/// Where "now" comes from: the wall clock, or a shared counter of milliseconds that tests
/// (and the feed's compaction filter, which captures it) read.
#[derive(Clone, Debug)]
pub enum Clock {
    /// The system clock.
    System,
    /// Milliseconds since the Unix epoch, set by whoever holds the `Arc`.
    Manual(Arc<AtomicU64>),
}

impl Clock {
    /// A manual clock starting at `ms`.
    pub fn manual(ms: u64) -> Self {
        Clock::Manual(Arc::new(AtomicU64::new(ms)))
    }

    /// Milliseconds since the Unix epoch.
    pub fn now_ms(&self) -> u64 {
        match self {
            Clock::System => SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64),
            Clock::Manual(ms) => ms.load(Ordering::SeqCst),
        }
    }

    /// Moves a manual clock forward by `ms` (the system clock moves by itself).
    pub fn advance(&self, ms: u64) {
        if let Clock::Manual(now) = self {
            now.fetch_add(ms, Ordering::SeqCst);
        }
    }
}

/// The feed column's options: a compaction filter that drops entries whose expiry has
/// passed by `clock`.
pub fn feed_options(clock: Clock) -> ColumnOptions {
    ColumnOptions::point_and_scan(1).compaction_filter(move |_key, value| {
        match FeedItem::try_from_slice(value) {
            Ok(item) => item.expires_at_ms > clock.now_ms(),
            // Never drop what cannot be read.
            Err(_) => true,
        }
    })
}

/// The options of `column` in a store whose time comes from `clock`.
pub fn column_options(column: Table, clock: &Clock) -> ColumnOptions {
    match column {
        Table::Feed => feed_options(clock.clone()),
        other => weft_store::ColumnSet::options(other),
    }
}

/// An in-memory backend whose feed expires by `clock`.
pub fn memory_backend(clock: &Clock) -> MemoryBackend {
    MemoryBackend::with_options::<Table>(|c| column_options(c, clock))
}

/// A RocksDB backend at `path` whose feed expires by `clock`.
pub fn rocks_backend(path: &std::path::Path, config: &RocksConfig, clock: &Clock) -> Result<RocksBackend> {
    Ok(RocksBackend::open_with_options::<Table>(path, config, |c| column_options(c, clock))?)
}

/// The day (since the Unix epoch, UTC) of a timestamp: the timeline's partition.
pub fn day_of(ms: u64) -> u32 {
    u32::try_from(ms / DAY_MS).unwrap_or(u32::MAX)
}

/// A day as `YYYY-MM-DD` (the seed's `TIMELINE#2025-01-27`).
pub fn date(day: u32) -> String {
    // Days to civil date (proleptic Gregorian), after Howard Hinnant's algorithm.
    let z = i64::from(day) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

/// An ActivityPub actor type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, BorshSerialize, BorshDeserialize)]
pub enum ActorType {
    /// `Person`.
    Person,
    /// `Group`.
    Group,
}

impl ActorType {
    /// The ActivityStreams type name.
    pub fn as_str(self) -> &'static str {
        match self {
            ActorType::Person => "Person",
            ActorType::Group => "Group",
        }
    }
}

/// The USER entity: profile attributes, counters and ActivityPub actor fields.
#[derive(Clone, Debug, PartialEq, Eq, BorshSerialize, BorshDeserialize)]
pub struct Profile {
    /// `username`.
    pub username: String,
    /// `email`.
    pub email: String,
    /// `display_name`.
    pub display_name: String,
    /// `bio`.
    pub bio: String,
    /// `profile_image_url`.
    pub profile_image_url: Option<String>,
    /// `created_at`, ms since the epoch.
    pub created_at_ms: u64,
    /// `updated_at`, ms since the epoch.
    pub updated_at_ms: u64,
    /// `followers_count`.
    pub followers_count: u64,
    /// `following_count`.
    pub following_count: u64,
    /// `posts_count`.
    pub posts_count: u64,
    /// `is_verified`.
    pub is_verified: bool,
    /// `is_private`.
    pub is_private: bool,
    /// `status`.
    pub status: String,
    /// `actor_type`.
    pub actor_type: ActorType,
    /// `public_key` (PEM).
    pub public_key: String,
    /// `inbox_url`.
    pub inbox_url: String,
    /// `outbox_url`.
    pub outbox_url: String,
    /// `followers_url`.
    pub followers_url: String,
    /// `following_url`.
    pub following_url: String,
    /// `preferred_username`.
    pub preferred_username: String,
    /// `domain`: `None` for local users.
    pub domain: Option<String>,
}

impl Profile {
    /// The actor as an ActivityStreams JSON document.
    pub fn to_activitypub(&self, actor_id: &str) -> String {
        format!(
            concat!(
                r#"{{"@context":["https://www.w3.org/ns/activitystreams","https://w3id.org/security/v1"],"#,
                r#""type":{},"id":{},"preferredUsername":{},"name":{},"summary":{},"#,
                r#""inbox":{},"outbox":{},"followers":{},"following":{},"#,
                r#""publicKey":{{"id":{},"owner":{},"publicKeyPem":{}}}}}"#
            ),
            json_string(self.actor_type.as_str()),
            json_string(actor_id),
            json_string(&self.preferred_username),
            json_string(&self.display_name),
            json_string(&self.bio),
            json_string(&self.inbox_url),
            json_string(&self.outbox_url),
            json_string(&self.followers_url),
            json_string(&self.following_url),
            json_string(&format!("{actor_id}#main-key")),
            json_string(actor_id),
            json_string(&self.public_key),
        )
    }
}

/// A JSON string literal.
fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// What a new user supplies; the server fills in the rest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewProfile {
    /// `username` (also `preferred_username`).
    pub username: String,
    /// `email`.
    pub email: String,
    /// `display_name`.
    pub display_name: String,
    /// `bio`.
    pub bio: String,
    /// Person or Group.
    pub actor_type: ActorType,
    /// The actor's public key (PEM).
    pub public_key: String,
}

/// `content_type` of a post.
#[derive(Clone, Copy, Debug, PartialEq, Eq, BorshSerialize, BorshDeserialize)]
pub enum ContentType {
    /// Text.
    Text,
    /// Image.
    Image,
    /// Video.
    Video,
}

/// `visibility` of a post.
#[derive(Clone, Copy, Debug, PartialEq, Eq, BorshSerialize, BorshDeserialize)]
pub enum Visibility {
    /// Everyone; on the public timeline.
    Public,
    /// Followers only.
    Followers,
    /// The author only.
    Private,
}

/// The POST entity.
#[derive(Clone, Debug, PartialEq, Eq, BorshSerialize, BorshDeserialize)]
pub struct Post {
    /// `author_id`.
    pub author_id: String,
    /// `author_username`.
    pub author_username: String,
    /// `content`.
    pub content: String,
    /// `content_type`.
    pub content_type: ContentType,
    /// `media_urls`.
    pub media_urls: Vec<String>,
    /// `created_at`, ms.
    pub created_at_ms: u64,
    /// `updated_at`, ms.
    pub updated_at_ms: u64,
    /// `likes_count`.
    pub likes_count: u64,
    /// `visibility`.
    pub visibility: Visibility,
    /// `is_deleted`.
    pub is_deleted: bool,
    /// `hashtags`.
    pub hashtags: Vec<String>,
    /// `mentions`.
    pub mentions: Vec<String>,
    /// `activity_id`.
    pub activity_id: String,
    /// `activity_type` (`Note`).
    pub activity_type: String,
    /// `audience`.
    pub audience: Vec<String>,
}

/// What an author supplies for a new post.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewPost {
    /// `content`.
    pub content: String,
    /// `content_type`.
    pub content_type: ContentType,
    /// `media_urls`.
    pub media_urls: Vec<String>,
    /// `visibility`.
    pub visibility: Visibility,
    /// `hashtags`.
    pub hashtags: Vec<String>,
    /// `mentions`.
    pub mentions: Vec<String>,
}

impl NewPost {
    /// A public text post.
    pub fn text(content: impl Into<String>) -> Self {
        NewPost {
            content: content.into(),
            content_type: ContentType::Text,
            media_urls: Vec::new(),
            visibility: Visibility::Public,
            hashtags: Vec::new(),
            mentions: Vec::new(),
        }
    }
}

/// The FOLLOW relationship.
#[derive(Clone, Debug, PartialEq, Eq, BorshSerialize, BorshDeserialize)]
pub struct Follow {
    /// `follower_id`.
    pub follower_id: String,
    /// `followed_id`.
    pub followed_id: String,
    /// `follower_username`.
    pub follower_username: String,
    /// `followed_username`.
    pub followed_username: String,
    /// `created_at`, ms.
    pub created_at_ms: u64,
    /// `status`.
    pub status: String,
    /// `activity_id`.
    pub activity_id: String,
    /// `activity_type` (`Follow`).
    pub activity_type: String,
}

/// The LIKE entity (permanent: there is no unlike).
#[derive(Clone, Debug, PartialEq, Eq, BorshSerialize, BorshDeserialize)]
pub struct Like {
    /// `user_id`.
    pub user_id: String,
    /// `post_id`.
    pub post_id: String,
    /// `author_id`.
    pub author_id: String,
    /// `created_at`, ms.
    pub created_at_ms: u64,
    /// `activity_id`.
    pub activity_id: String,
    /// `activity_type` (`Like`).
    pub activity_type: String,
}

/// A pre-computed feed entry (USER FEED). `expires_at_ms` is the TTL attribute.
#[derive(Clone, Debug, PartialEq, Eq, BorshSerialize, BorshDeserialize)]
pub struct FeedItem {
    /// When the entry expires (the post's creation plus [`FEED_TTL_MS`]).
    pub expires_at_ms: u64,
    /// `post_id`.
    pub post_id: String,
    /// `author_id`.
    pub author_id: String,
    /// `author_username`.
    pub author_username: String,
    /// `content_preview`.
    pub content_preview: String,
    /// `content_type`.
    pub content_type: ContentType,
    /// `created_at` of the post, ms.
    pub created_at_ms: u64,
    /// `inserted_at`, ms.
    pub inserted_at_ms: u64,
}

/// A page of a user's feed, newest first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FeedPage {
    /// The live entries.
    pub items: Vec<FeedItem>,
    /// Where the next page starts (`ExclusiveStartKey`), if more live entries may follow.
    pub next: Option<FeedEntry>,
}

/// Errors of the example.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// No user has this id.
    #[error("no user {0}")]
    NoSuchUser(String),
    /// The user id is taken.
    #[error("user {0} already exists")]
    UserExists(String),
    /// No post has this id.
    #[error("no post {0}")]
    NoSuchPost(String),
    /// The post id is taken.
    #[error("post {0} already exists")]
    PostExists(String),
    /// The follow exists already (the whole transaction was rejected).
    #[error("{follower} already follows {followed}")]
    AlreadyFollowing {
        /// The follower.
        follower: String,
        /// The followed user.
        followed: String,
    },
    /// There is no follow to remove.
    #[error("{follower} does not follow {followed}")]
    NotFollowing {
        /// The would-be follower.
        follower: String,
        /// The would-be followed user.
        followed: String,
    },
    /// A user cannot follow themself.
    #[error("{0} cannot follow themself")]
    SelfFollow(String),
    /// The like exists already (the whole transaction was rejected).
    #[error("{user} already likes {post}")]
    AlreadyLiked {
        /// The user.
        user: String,
        /// The post.
        post: String,
    },
    /// A counter would leave its range (a bug: counters are kept exact).
    #[error("counter {0} would leave its range")]
    CounterRange(&'static str),
    /// Concurrent writers kept invalidating this write's preconditions.
    #[error("gave up after {MAX_ATTEMPTS} conflicting attempts")]
    Contention,
}

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

fn text(s: &str) -> Text {
    Text::from(s)
}

fn inc(n: u64, name: &'static str) -> Result<u64> {
    n.checked_add(1).ok_or(Error::CounterRange(name))
}

fn dec(n: u64, name: &'static str) -> Result<u64> {
    n.checked_sub(1).ok_or(Error::CounterRange(name))
}

/// The social app's storage over any backend.
pub struct Social<B: Backend> {
    store: Store<B, Table>,
    base: String,
    clock: Clock,
}

impl<B: Backend> Social<B> {
    /// Opens the store; local actors get URLs under `base_url`, and time comes from `clock`
    /// (which should be the clock the backend's feed column was opened with, see
    /// [`memory_backend`] and [`rocks_backend`]).
    pub fn open(backend: B, base_url: &str, clock: Clock) -> Result<Self> {
        Ok(Social { store: Store::open(backend)?, base: base_url.trim_end_matches('/').to_string(), clock })
    }

    /// The typed store underneath.
    pub fn store(&self) -> &Store<B, Table> {
        &self.store
    }

    /// The store's clock.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// Runs `attempt` until it commits (`Some`), fails, or [`MAX_ATTEMPTS`] conflicts pass.
    fn retry<T>(&self, mut attempt: impl FnMut() -> Result<Option<T>>) -> Result<T> {
        for _ in 0..MAX_ATTEMPTS {
            if let Some(done) = attempt()? {
                return Ok(done);
            }
            std::thread::yield_now();
        }
        Err(Error::Contention)
    }

    /// The actor URL of user `user`.
    pub fn actor_url(&self, user: &str) -> String {
        format!("{}/users/{user}", self.base)
    }

    fn get_profile(&self, user: &str) -> Result<Profile> {
        self.store.get(&ProfileItem { user: text(user) })?.ok_or_else(|| Error::NoSuchUser(user.to_string()))
    }

    /// Creates user `user` (`PK USER#user`, `SK PROFILE`).
    pub fn create_user(&self, user: &str, new: NewProfile) -> Result<Profile> {
        let now = self.clock.now_ms();
        let url = self.actor_url(user);
        let profile = Profile {
            preferred_username: new.username.clone(),
            username: new.username,
            email: new.email,
            display_name: new.display_name,
            bio: new.bio,
            profile_image_url: None,
            created_at_ms: now,
            updated_at_ms: now,
            followers_count: 0,
            following_count: 0,
            posts_count: 0,
            is_verified: false,
            is_private: false,
            status: "active".into(),
            actor_type: new.actor_type,
            public_key: new.public_key,
            inbox_url: format!("{url}/inbox"),
            outbox_url: format!("{url}/outbox"),
            followers_url: format!("{url}/followers"),
            following_url: format!("{url}/following"),
            domain: None,
        };
        if self.store.put_if_absent(&ProfileItem { user: text(user) }, &profile)? {
            Ok(profile)
        } else {
            Err(Error::UserExists(user.to_string()))
        }
    }

    /// A user's profile (the ActivityPub actor).
    pub fn profile(&self, user: &str) -> Result<Option<Profile>> {
        Ok(self.store.get(&ProfileItem { user: text(user) })?)
    }

    /// Changes a profile's display name and bio, keeping its counters whatever concurrent
    /// follows do meanwhile.
    pub fn update_profile(&self, user: &str, display_name: &str, bio: &str) -> Result<Profile> {
        let key = ProfileItem { user: text(user) };
        self.retry(|| {
            let old = self.get_profile(user)?;
            let mut new = old.clone();
            new.display_name = display_name.to_string();
            new.bio = bio.to_string();
            new.updated_at_ms = self.clock.now_ms();
            Ok(self.store.compare_and_set(&key, Some(&old), Some(&new))?.then_some(new))
        })
    }

    /// Follows `followed` as `follower`: the FOLLOWING item, its GSI1 and GSI2 rows and both
    /// users' counters, in one transaction that fails whole if the follow exists.
    pub fn follow(&self, follower: &str, followed: &str) -> Result<Follow> {
        if follower == followed {
            return Err(Error::SelfFollow(follower.to_string()));
        }
        let item = FollowingItem { user: text(follower), followed: text(followed) };
        self.retry(|| {
            if self.store.contains(&item)? {
                return Err(Error::AlreadyFollowing { follower: follower.into(), followed: followed.into() });
            }
            let (mut a, mut b) = (self.get_profile(follower)?, self.get_profile(followed)?);
            let now = self.clock.now_ms();
            let follow = Follow {
                follower_id: follower.into(),
                followed_id: followed.into(),
                follower_username: a.username.clone(),
                followed_username: b.username.clone(),
                created_at_ms: now,
                status: "active".into(),
                activity_id: format!("{}/follows/{follower}/{followed}/{now}", self.base),
                activity_type: "Follow".into(),
            };
            let mut batch = self.store.batch();
            batch.require_absent(&item);
            batch.require_value(&ProfileItem { user: text(follower) }, &a);
            batch.require_value(&ProfileItem { user: text(followed) }, &b);
            a.following_count = inc(a.following_count, "following_count")?;
            b.followers_count = inc(b.followers_count, "followers_count")?;
            batch.put(&item, &follow);
            batch.put(&FollowerEntry { user: text(followed), follower: text(follower) }, &());
            batch.put(&follow_activity(&follow), &());
            batch.put(&ProfileItem { user: text(follower) }, &a);
            batch.put(&ProfileItem { user: text(followed) }, &b);
            Ok(self.store.write_conditional(batch)?.then(|| follow.clone()))
        })
    }

    /// Unfollows: removes the follow's three rows and decrements both counters atomically.
    pub fn unfollow(&self, follower: &str, followed: &str) -> Result<()> {
        let item = FollowingItem { user: text(follower), followed: text(followed) };
        self.retry(|| {
            let Some(follow) = self.store.get(&item)? else {
                return Err(Error::NotFollowing { follower: follower.into(), followed: followed.into() });
            };
            let (mut a, mut b) = (self.get_profile(follower)?, self.get_profile(followed)?);
            let mut batch = self.store.batch();
            batch.require_value(&item, &follow);
            batch.require_value(&ProfileItem { user: text(follower) }, &a);
            batch.require_value(&ProfileItem { user: text(followed) }, &b);
            a.following_count = dec(a.following_count, "following_count")?;
            b.followers_count = dec(b.followers_count, "followers_count")?;
            batch.delete(&item);
            batch.delete(&FollowerEntry { user: text(followed), follower: text(follower) });
            batch.delete(&follow_activity(&follow));
            batch.put(&ProfileItem { user: text(follower) }, &a);
            batch.put(&ProfileItem { user: text(followed) }, &b);
            Ok(self.store.write_conditional(batch)?.then_some(()))
        })
    }

    /// Whether `a` follows `b` (a point read of `USER#a` / `FOLLOWING#b`).
    pub fn is_following(&self, a: &str, b: &str) -> Result<bool> {
        Ok(self.store.contains(&FollowingItem { user: text(a), followed: text(b) })?)
    }

    /// Whom `user` follows, in id order, after `after`, at most `limit`.
    pub fn following(&self, user: &str, after: Option<&str>, limit: usize) -> Result<Vec<String>> {
        let mut scan = self.store.scan(FollowingItem::prefix(&text(user))).limit(limit);
        if let Some(after) = after {
            scan = scan.after(&FollowingItem { user: text(user), followed: text(after) });
        }
        Ok(scan.collect_all()?.into_iter().map(|(k, _)| k.followed.0).collect())
    }

    /// Who follows `user` (GSI1 `FOLLOWER#`), in id order, after `after`, at most `limit`.
    pub fn followers(&self, user: &str, after: Option<&str>, limit: usize) -> Result<Vec<String>> {
        let mut scan = self.store.scan(FollowerEntry::prefix(&text(user))).limit(limit);
        if let Some(after) = after {
            scan = scan.after(&FollowerEntry { user: text(user), follower: text(after) });
        }
        Ok(scan.collect_all()?.into_iter().map(|(k, _)| k.follower.0).collect())
    }

    /// Follows made on `day`, newest first (GSI2 `FOLLOW_ACTIVITY#day`).
    pub fn follow_activity(&self, day: u32, limit: usize) -> Result<Vec<(String, String)>> {
        let rows = self.store.scan(FollowActivityEntry::prefix(&day)).reverse().limit(limit).collect_all()?;
        Ok(rows.into_iter().map(|(k, ())| (k.follower.0, k.followed.0)).collect())
    }

    /// Creates post `post` by `author`: the POST item, its GSI1 and GSI2 rows and the author's
    /// `posts_count`, atomically; then fans the post out to the author's followers' feeds.
    pub fn create_post(&self, author: &str, post: &str, new: NewPost) -> Result<Post> {
        let item = PostItem { post: text(post) };
        let created = self.retry(|| {
            if self.store.contains(&item)? {
                return Err(Error::PostExists(post.to_string()));
            }
            let mut profile = self.get_profile(author)?;
            let now = self.clock.now_ms();
            let value = Post {
                author_id: author.into(),
                author_username: profile.username.clone(),
                content: new.content.clone(),
                content_type: new.content_type,
                media_urls: new.media_urls.clone(),
                created_at_ms: now,
                updated_at_ms: now,
                likes_count: 0,
                visibility: new.visibility,
                is_deleted: false,
                hashtags: new.hashtags.clone(),
                mentions: new.mentions.clone(),
                activity_id: format!("{}/posts/{post}", self.base),
                activity_type: "Note".into(),
                audience: match new.visibility {
                    Visibility::Public => {
                        vec!["https://www.w3.org/ns/activitystreams#Public".into()]
                    }
                    Visibility::Followers => vec![profile.followers_url.clone()],
                    Visibility::Private => Vec::new(),
                },
            };
            let mut batch = self.store.batch();
            batch.require_absent(&item);
            batch.require_value(&ProfileItem { user: text(author) }, &profile);
            profile.posts_count = inc(profile.posts_count, "posts_count")?;
            batch.put(&item, &value);
            batch.put(&UserPostEntry { user: text(author), created_ms: now, post: text(post) }, &());
            if value.visibility == Visibility::Public {
                batch.put(&TimelineEntry { day: day_of(now), created_ms: now, post: text(post) }, &());
            }
            batch.put(&ProfileItem { user: text(author) }, &profile);
            Ok(self.store.write_conditional(batch)?.then(|| value.clone()))
        })?;
        if created.visibility != Visibility::Private {
            self.fan_out(post, &created)?;
        }
        Ok(created)
    }

    /// Writes a feed entry for `post` into every follower's feed, a page of followers per batch
    /// (the seed does this from a stream; feeds may lag the post, as the seed allows).
    fn fan_out(&self, post: &str, value: &Post) -> Result<()> {
        let item = FeedItem {
            expires_at_ms: value.created_at_ms.saturating_add(FEED_TTL_MS),
            post_id: post.into(),
            author_id: value.author_id.clone(),
            author_username: value.author_username.clone(),
            content_preview: value.content.chars().take(80).collect(),
            content_type: value.content_type,
            created_at_ms: value.created_at_ms,
            inserted_at_ms: self.clock.now_ms(),
        };
        let author = text(&value.author_id);
        let mut after: Option<FollowerEntry> = None;
        loop {
            let mut scan = self.store.scan(FollowerEntry::prefix(&author)).limit(FAN_OUT_BATCH);
            if let Some(cursor) = &after {
                scan = scan.after(cursor);
            }
            let page = scan.page()?;
            let mut batch = self.store.batch();
            for (entry, ()) in &page.rows {
                let feed = FeedEntry { user: entry.follower.clone(), created_ms: item.created_at_ms, post: text(post) };
                batch.put(&feed, &item);
            }
            self.store.write(batch)?;
            match page.next {
                Some(next) => after = Some(next),
                None => return Ok(()),
            }
        }
    }

    /// A post's METADATA item.
    pub fn post(&self, post: &str) -> Result<Option<Post>> {
        Ok(self.store.get(&PostItem { post: text(post) })?)
    }

    /// `user`'s posts, newest first, at most `limit` (GSI1 `POST#`, `ScanIndexForward: false`).
    pub fn user_posts(&self, user: &str, limit: usize) -> Result<Vec<(String, Post)>> {
        let rows = self.store.scan(UserPostEntry::prefix(&text(user))).reverse().limit(limit).collect_all()?;
        self.posts(rows.into_iter().map(|(k, ())| k.post))
    }

    /// The public timeline of `day`, newest first, at most `limit` (GSI2 `TIMELINE#day`).
    pub fn timeline(&self, day: u32, limit: usize) -> Result<Vec<(String, Post)>> {
        let rows = self.store.scan(TimelineEntry::prefix(&day)).reverse().limit(limit).collect_all()?;
        self.posts(rows.into_iter().map(|(k, ())| k.post))
    }

    /// Resolves post ids to their items with one batched read.
    fn posts(&self, ids: impl Iterator<Item = Text>) -> Result<Vec<(String, Post)>> {
        let keys: Vec<PostItem> = ids.map(|post| PostItem { post }).collect();
        let values = self.store.multi_get(&keys)?;
        keys.into_iter()
            .zip(values)
            .map(|(k, v)| v.map(|p| (k.post.0.clone(), p)).ok_or(Error::NoSuchPost(k.post.0)))
            .collect()
    }

    /// Likes `post` as `user`: the LIKE item (conditional on its absence), its GSI1 row and the
    /// post's `likes_count`, in one transaction. There is no unlike.
    pub fn like(&self, user: &str, post: &str) -> Result<Like> {
        let item = LikeItem { post: text(post), user: text(user) };
        let post_key = PostItem { post: text(post) };
        if !self.store.contains(&ProfileItem { user: text(user) })? {
            return Err(Error::NoSuchUser(user.to_string()));
        }
        self.retry(|| {
            if self.store.contains(&item)? {
                return Err(Error::AlreadyLiked { user: user.into(), post: post.into() });
            }
            let mut value = self.store.get(&post_key)?.ok_or_else(|| Error::NoSuchPost(post.to_string()))?;
            let now = self.clock.now_ms();
            let like = Like {
                user_id: user.into(),
                post_id: post.into(),
                author_id: value.author_id.clone(),
                created_at_ms: now,
                activity_id: format!("{}/likes/{user}/{post}", self.base),
                activity_type: "Like".into(),
            };
            let mut batch = self.store.batch();
            batch.require_absent(&item);
            batch.require_value(&post_key, &value);
            value.likes_count = inc(value.likes_count, "likes_count")?;
            batch.put(&item, &like);
            batch.put(&UserLikeEntry { user: text(user), created_ms: now, post: text(post) }, &());
            batch.put(&post_key, &value);
            Ok(self.store.write_conditional(batch)?.then(|| like.clone()))
        })
    }

    /// Who liked `post`, in user id order, at most `limit`.
    pub fn post_likes(&self, post: &str, limit: usize) -> Result<Vec<String>> {
        let rows = self.store.scan(LikeItem::prefix(&text(post))).limit(limit).collect_all()?;
        Ok(rows.into_iter().map(|(k, _)| k.user.0).collect())
    }

    /// The posts `user` liked, most recent like first, at most `limit` (GSI1 `LIKE#`).
    pub fn user_likes(&self, user: &str, limit: usize) -> Result<Vec<String>> {
        let rows = self.store.scan(UserLikeEntry::prefix(&text(user))).reverse().limit(limit).collect_all()?;
        Ok(rows.into_iter().map(|(k, ())| k.post.0).collect())
    }

    /// A page of `user`'s feed, newest first, starting after `after`. Expired entries are never
    /// returned, compacted away or not; the scan stops at the first one, since everything older
    /// has expired too.
    pub fn feed(&self, user: &str, after: Option<&FeedEntry>, limit: usize) -> Result<FeedPage> {
        let now = self.clock.now_ms();
        let mut scan = self.store.scan(FeedEntry::prefix(&text(user))).reverse();
        if let Some(after) = after {
            scan = scan.after(after);
        }
        let mut items = Vec::new();
        let mut last = None;
        let mut next = None;
        for row in scan.iter()? {
            let (key, item) = row?;
            if item.expires_at_ms <= now {
                break;
            }
            if items.len() == limit {
                next = last.take();
                break;
            }
            items.push(item);
            last = Some(key);
        }
        Ok(FeedPage { items, next })
    }

    /// Reclaims expired feed entries: flushes, then compacts the feed column, whose compaction
    /// filter drops every entry expired by the store's clock.
    pub fn reclaim_expired_feed(&self) -> Result<()> {
        self.store.flush()?;
        self.store.compact(Table::Feed)?;
        Ok(())
    }
}

fn follow_activity(follow: &Follow) -> FollowActivityEntry {
    FollowActivityEntry {
        day: day_of(follow.created_at_ms),
        created_ms: follow.created_at_ms,
        follower: text(&follow.follower_id),
        followed: text(&follow.followed_id),
    }
}
