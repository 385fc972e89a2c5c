//! loam-derive: `#[derive(Trace)]` for loam's managed types.
//!
//! Use it through its re-export, `loam_runtime::Trace` (or `loam::runtime::Trace`
//! through the facade); the generated code names the runtime the way the
//! crate being compiled does (found in its Cargo.toml with
//! `proc-macro-crate`). The trait's contract lives on `loam_runtime::Trace`;
//! this crate only turns a type definition into an impl that meets it.

use proc_macro2::{TokenStream, TokenTree};
use quote::{quote, quote_spanned, ToTokens};
use syn::spanned::Spanned;
use syn::{Attribute, Data, DeriveInput, Fields, Ident, Member, Type};

/// Derives `loam_runtime::Trace`: the value's `trace` visits every field.
///
/// # What is generated
/// - `unsafe impl Trace for T`, with a `Trace` bound on every type parameter
///   that a traced field's type names (one named only by `#[trace(skip)]`
///   fields gets `Send + Sync` only). Every traced field's type must
///   implement `Trace` (the error points at the field otherwise), and the
///   type must be `Send + Sync` like every managed type
///   (so a `Cell` or `RefCell` field is an error; use the runtime's barrier
///   cells).
/// - `NEEDS_TRACE` is the OR of the traced fields' `NEEDS_TRACE`, so a type
///   made only of leaf data is skipped by the containers that hold it. A field
///   whose type names the type itself (`Box<Self>`, `Vec<Node>` inside `Node`)
///   counts as `true`: the OR would otherwise be a constant that depends on
///   itself, which rustc rejects as a cycle. (Types that reach each other
///   through two or more definitions still make that cycle, and so does a
///   field whose type reaches the type through an alias, `type Next<'gc> =
///   Option<Box<Node<'gc>>>`, which the derive sees only by its name; give
///   one of them a manual impl, or spell the field's type out.)
/// - `trace` calls `Trace::trace` on every field of the value (of the active
///   variant for an enum), in declaration order.
/// - Unless the type says `#[trace(unsafe_drop)]`, an impl of a hidden
///   marker trait that conflicts with any `impl Drop` for the type: writing
///   one is a compile error (E0119, "conflicting implementations of trait
///   `MustNotImplDrop`").
///
/// Unions are rejected.
///
/// # Attributes
/// - `#[trace(unsafe_drop)]` on the type allows an `impl Drop`, with an
///   `unsafe impl loam_runtime::UnsafeDrop` for the type beside it (`Trace`
///   is implemented only where that holds). A destructor runs on a
///   collector thread after the sweep, when the objects its managed
///   pointers name may already be freed by the same sweep; the `Drop` impl
///   must therefore never dereference a managed pointer. The compiler
///   cannot check that: the `unsafe impl` is the promise.
/// - `#[trace(skip)]` on a field leaves it out of `trace` and `NEEDS_TRACE`,
///   and its type needs no `Trace` impl. It is safe: the derive checks that the
///   field's type is `'static`, and no `'static` value can hold a managed
///   pointer, because `Gc<'gc, T>` carries the branded `'gc` lifetime of one
///   `mutate` call (see the runtime's design header); a type that contains one
///   is not `'static`. Skipping a field that may hold one is therefore a
///   compile error ("lifetime may not live long enough", or "the parameter
///   type `T` may not live long enough": add `T: 'static` to the type if that
///   is what you meant). A `'static` field can still hold a `GlobalRoot`;
///   skipping it is sound since a global root keeps its object alive by
///   itself.
///
/// # Examples
/// ```
/// use loam_runtime::Trace;
/// use std::collections::HashMap;
///
/// #[derive(Trace)]
/// struct Point {
///     x: f64,
///     y: f64,
/// }
///
/// #[derive(Trace)]
/// enum Shape<T> {
///     Dot(Point),
///     Poly { points: Vec<Point>, tags: HashMap<String, T> },
/// }
///
/// #[derive(Trace)]
/// struct Named {
///     name: String,
///     #[trace(skip)] // 'static, so it cannot hold a managed pointer
///     created: std::time::Instant,
/// }
///
/// // Leaf data all the way down: containers do not even iterate over it.
/// assert!(!<Point as Trace>::NEEDS_TRACE);
/// assert!(!<Shape<u32> as Trace>::NEEDS_TRACE);
/// assert!(!<Named as Trace>::NEEDS_TRACE);
/// ```
///
/// A destructor needs the opt-in, and the promise:
/// ```
/// use loam_runtime::{Trace, UnsafeDrop};
///
/// #[derive(Trace)]
/// #[trace(unsafe_drop)]
/// struct Logged(u32);
///
/// // SAFETY: the destructor reads only the plain field.
/// unsafe impl UnsafeDrop for Logged {}
///
/// impl Drop for Logged {
///     // Touches no managed pointer: that is what `unsafe_drop` promises.
///     fn drop(&mut self) {
///         println!("dropped {}", self.0);
///     }
/// }
/// # drop(Logged(1));
/// ```
#[proc_macro_derive(Trace, attributes(trace))]
pub fn derive_trace(input: proc_macro::TokenStream) -> proc_macro::TokenStream {
    let input = syn::parse_macro_input!(input as DeriveInput);
    expand(&input)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// One field as the derive sees it.
struct Field<'a> {
    member: Member,
    ty: &'a Type,
    skip: bool,
}

/// A struct, or one variant of an enum: the path that names it in a pattern
/// and its fields.
struct Shape<'a> {
    path: TokenStream,
    fields: Vec<Field<'a>>,
}

/// How the crate being compiled names loam-runtime: `::loam_runtime` when it
/// depends on it (or is it: the runtime says `extern crate self as
/// loam_runtime`), `::<name>::runtime` when it reaches it through the `loam`
/// facade, under whatever name its Cargo.toml gives either.
#[derive(Clone)]
enum RuntimePath {
    /// `::name`
    Direct(String),
    /// `::name::runtime`
    Facade(String),
}

impl RuntimePath {
    fn find() -> RuntimePath {
        use proc_macro_crate::{crate_name, FoundCrate};
        match crate_name("loam-runtime") {
            Ok(FoundCrate::Name(name)) => return RuntimePath::Direct(name),
            Ok(FoundCrate::Itself) => return RuntimePath::Direct("loam_runtime".into()),
            Err(_) => {}
        }
        match crate_name("loam") {
            Ok(FoundCrate::Name(name)) => RuntimePath::Facade(name),
            // The facade's own targets also depend on loam-runtime, found
            // above; keep the plain name otherwise.
            _ => RuntimePath::Direct("loam_runtime".into()),
        }
    }

    /// The path, spanned at `span` (so that errors point where the caller's
    /// `quote_spanned!` does, and rustc reports each once).
    fn at(&self, span: proc_macro2::Span) -> TokenStream {
        match self {
            RuntimePath::Direct(name) => {
                let name = Ident::new(name, span);
                quote_spanned!(span=> ::#name)
            }
            RuntimePath::Facade(name) => {
                let name = Ident::new(name, span);
                quote_spanned!(span=> ::#name::runtime)
            }
        }
    }
}

fn expand(input: &DeriveInput) -> syn::Result<TokenStream> {
    let rt_path = RuntimePath::find();
    let rt = rt_path.at(proc_macro2::Span::call_site());
    let unsafe_drop = parse_container_attrs(&input.attrs)?;
    refuse_packed(&input.attrs)?;
    let shapes = match &input.data {
        Data::Struct(data) => vec![Shape {
            path: quote!(Self),
            fields: parse_fields(&data.fields)?,
        }],
        Data::Enum(data) => data
            .variants
            .iter()
            .map(|variant| {
                if let Some(attr) = find_trace_attr(&variant.attrs) {
                    return Err(syn::Error::new_spanned(
                        attr,
                        "`#[trace(...)]` is not supported on enum variants; put `#[trace(skip)]` on fields",
                    ));
                }
                let ident = &variant.ident;
                Ok(Shape {
                    path: quote!(Self::#ident),
                    fields: parse_fields(&variant.fields)?,
                })
            })
            .collect::<syn::Result<_>>()?,
        Data::Union(data) => {
            return Err(syn::Error::new(
                data.union_token.span,
                "`#[derive(Trace)]` does not support unions: the active field is unknown",
            ))
        }
    };

    let name = &input.ident;
    let fields = || shapes.iter().flat_map(|shape| &shape.fields);
    // The tracer parameter, spanned at the derive where it is declared
    // and where it is used: a use spanned at a field's type would take
    // that type's hygiene, which differs from the derive's when a
    // `macro_rules!` writes the derive and its caller the type (the
    // parameter was then not found).
    let tracer = Ident::new("__tracer", proc_macro2::Span::call_site());

    let needs_trace = fields().filter(|f| !f.skip).map(|f| {
        let ty = f.ty;
        if names_type(ty.to_token_stream(), name) {
            quote_spanned!(ty.span()=> true)
        } else {
            let rt = rt_path.at(ty.span());
            quote_spanned!(ty.span()=> <#ty as #rt::Trace>::NEEDS_TRACE)
        }
    });
    let static_checks = fields().filter(|f| f.skip).map(|f| {
        let ty = f.ty;
        let rt = rt_path.at(ty.span());
        quote_spanned!(ty.span()=> #rt::__private::assert_static::<#ty>();)
    });
    let arms = shapes.iter().map(|shape| {
        let path = &shape.path;
        let traced: Vec<_> = shape.fields.iter().filter(|f| !f.skip).collect();
        let members = traced.iter().map(|f| &f.member);
        // Spanned at the field's type, so an error in the call below points
        // there, as the one for `NEEDS_TRACE` does, and rustc reports it once.
        let bindings: Vec<_> = traced
            .iter()
            .enumerate()
            .map(|(i, f)| Ident::new(&format!("__field{i}"), f.ty.span()))
            .collect();
        let calls = traced.iter().zip(&bindings).map(|(f, binding)| {
            let rt = rt_path.at(f.ty.span());
            quote_spanned!(f.ty.span()=> #rt::Trace::trace(#binding, #tracer);)
        });
        quote! {
            #path { #(#members: ref #bindings,)* .. } => { #(#calls)* }
        }
    });

    let mut trace_generics = input.generics.clone();
    for param in trace_generics.type_params_mut() {
        // A parameter only skipped fields name needs no `Trace` (the skip
        // asks it to be `'static`); the compiler checks every traced
        // field's `Trace` in the impl whatever bounds are left out here.
        let traced = fields()
            .filter(|f| !f.skip)
            .any(|f| names_type(f.ty.to_token_stream(), &param.ident));
        if traced {
            param.bounds.push(syn::parse_quote!(#rt::Trace));
        } else {
            // `Trace` asks for `Send + Sync`, which a `Trace` bound gave
            // every parameter before: kept for the others, so that a type
            // that compiled still does.
            param.bounds.push(syn::parse_quote!(::core::marker::Send));
            param.bounds.push(syn::parse_quote!(::core::marker::Sync));
        }
    }
    if unsafe_drop {
        // The destructor's promise is the user's `unsafe impl UnsafeDrop`:
        // without it, `Trace` does not hold (an error at the type for a
        // non-generic one, at its use for a generic one).
        trace_generics
            .make_where_clause()
            .predicates
            .push(syn::parse_quote!(Self: #rt::UnsafeDrop));
    }
    let (impl_generics, ty_generics, where_clause) = trace_generics.split_for_impl();
    let trace_impl = quote! {
        #[automatically_derived]
        // SAFETY: `trace` visits every field that is not `#[trace(skip)]`, and
        // each of those has a `Trace` impl of its own; a skipped field is
        // `'static` (checked below), so it holds no managed pointer.
        // `NEEDS_TRACE` is the OR of the traced fields' (or `true`).
        unsafe impl #impl_generics #rt::Trace for #name #ty_generics #where_clause {
            const NEEDS_TRACE: ::core::primitive::bool = false #(|| #needs_trace)*;

            #[inline]
            fn trace(&self, #tracer: &mut #rt::Tracer) {
                #(#static_checks)*
                match *self {
                    #(#arms)*
                }
            }
        }
    };

    let drop_guard = if unsafe_drop {
        TokenStream::new()
    } else {
        let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
        quote! {
            // Conflicts with the runtime's `impl<T: Drop> MustNotImplDrop for T`
            // if this type implements `Drop`.
            #[automatically_derived]
            impl #impl_generics #rt::__private::MustNotImplDrop
                for #name #ty_generics #where_clause {}
        }
    };

    let rebrand_impl = rebrand(input, &rt);

    Ok(quote! {
        #trace_impl
        #drop_guard
        #rebrand_impl
    })
}

/// `impl Rebrand` for a type with at most one lifetime (its brand) and
/// `'static` type parameters: `Unbranded` is the type with the brand made
/// the `Rootable` parameter. Nothing for other types (they name their
/// roots with `Rootable!`).
fn rebrand(input: &DeriveInput, rt: &TokenStream) -> TokenStream {
    let lifetimes: Vec<_> = input.generics.lifetimes().collect();
    if lifetimes.len() > 1 {
        return TokenStream::new();
    }
    let name = &input.ident;
    let brand = lifetimes.first().map(|l| l.lifetime.clone());
    let unbranded_args = input.generics.params.iter().map(|param| match param {
        syn::GenericParam::Lifetime(_) => quote!('__loam_a),
        syn::GenericParam::Type(t) => t.ident.to_token_stream(),
        syn::GenericParam::Const(c) => c.ident.to_token_stream(),
    });
    let unbranded = if input.generics.params.is_empty() {
        quote!(#name)
    } else {
        quote!(#name<#(#unbranded_args),*>)
    };
    let mut generics = input.generics.clone();
    for param in generics.type_params_mut() {
        param.bounds.push(syn::parse_quote!('static));
    }
    let gc = match &brand {
        Some(brand) => brand.clone(),
        None => {
            generics.params.insert(0, syn::parse_quote!('__loam_gc));
            syn::parse_quote!('__loam_gc)
        }
    };
    let (impl_generics, _, where_clause) = generics.split_for_impl();
    let (_, ty_generics, _) = input.generics.split_for_impl();
    quote! {
        #[automatically_derived]
        // SAFETY: `Unbranded` is this type with its only lifetime (if
        // any) bound by the `Rootable` parameter and its type parameters
        // `'static`, so its `Root` at `#gc` is `Self`.
        unsafe impl #impl_generics #rt::Rebrand<#gc> for #name #ty_generics #where_clause {
            type Unbranded = dyn for<'__loam_a> #rt::Rootable<'__loam_a, Root = #unbranded>;
        }
    }
}

/// A clear error for `#[repr(packed)]`: the pattern `trace` matches takes
/// a reference to each field, which a packed field may not give (rustc's
/// error would point into the generated code); and a barrier cell, an
/// atomic word, must stay aligned.
fn refuse_packed(attrs: &[Attribute]) -> syn::Result<()> {
    for attr in attrs.iter().filter(|a| a.path().is_ident("repr")) {
        let mut packed = false;
        // `repr`'s arguments: `packed`, `packed(N)`, `C`, `align(N)`, ...
        attr.parse_nested_meta(|meta| {
            packed |= meta.path.is_ident("packed");
            if meta.input.peek(syn::token::Paren) {
                let _skip: TokenStream = meta.input.parse::<proc_macro2::Group>()?.stream();
            }
            Ok(())
        })?;
        if packed {
            return Err(syn::Error::new_spanned(
                attr,
                "`#[derive(Trace)]` does not support `#[repr(packed)]`: tracing takes a reference to each field",
            ));
        }
    }
    Ok(())
}

/// The one `#[trace(...)]` attribute among `attrs`, if any.
fn find_trace_attr(attrs: &[Attribute]) -> Option<&Attribute> {
    attrs.iter().find(|attr| attr.path().is_ident("trace"))
}

/// Container options; returns whether `unsafe_drop` was given.
fn parse_container_attrs(attrs: &[Attribute]) -> syn::Result<bool> {
    let mut unsafe_drop = false;
    for attr in attrs.iter().filter(|attr| attr.path().is_ident("trace")) {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("unsafe_drop") {
                unsafe_drop = true;
                Ok(())
            } else if meta.path.is_ident("skip") {
                Err(meta.error("`#[trace(skip)]` goes on a field, not on the type"))
            } else {
                Err(meta.error("unknown option: the type takes `#[trace(unsafe_drop)]`"))
            }
        })?;
    }
    Ok(unsafe_drop)
}

fn parse_fields(fields: &Fields) -> syn::Result<Vec<Field<'_>>> {
    fields
        .iter()
        .enumerate()
        .map(|(index, field)| {
            let mut skip = false;
            for attr in field
                .attrs
                .iter()
                .filter(|attr| attr.path().is_ident("trace"))
            {
                attr.parse_nested_meta(|meta| {
                    if meta.path.is_ident("skip") {
                        skip = true;
                        Ok(())
                    } else if meta.path.is_ident("unsafe_drop") {
                        Err(meta.error("`#[trace(unsafe_drop)]` goes on the type, not on a field"))
                    } else {
                        Err(meta.error("unknown option: a field takes `#[trace(skip)]`"))
                    }
                })?;
            }
            let member = match &field.ident {
                Some(ident) => Member::Named(ident.clone()),
                None => Member::Unnamed(index.into()),
            };
            Ok(Field {
                member,
                ty: &field.ty,
                skip,
            })
        })
        .collect()
}

/// Whether `tokens` mention `Self` or `name`: the type being derived (by its
/// last path segment, so a same-named type elsewhere also counts, which only
/// makes `NEEDS_TRACE` conservatively `true`), or a type parameter (a field
/// that mentions `Self` counts too, which only adds a bound).
fn names_type(tokens: TokenStream, name: &Ident) -> bool {
    tokens.into_iter().any(|token| match token {
        TokenTree::Ident(ident) => ident == *name || ident == "Self",
        TokenTree::Group(group) => names_type(group.stream(), name),
        TokenTree::Punct(_) | TokenTree::Literal(_) => false,
    })
}
